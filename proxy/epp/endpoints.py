"""Backends as the data plane names them: ``ip:port``.

Envoy connects to the address the picker answers with (an ``ORIGINAL_DST`` cluster takes it
as it is), and reports subsets and the endpoint that served as addresses too. The policy
names each engine by URL; its host is resolved here, off the request path: at start, on
every policy change and every ``refresh_s`` (a pod restarted behind a headless Service's
name comes back with a new address).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

from proxy.routing.fleet import BackendState

log = logging.getLogger("specroute.epp")


def _literal(host: str) -> str | None:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return None


def _join(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


class Endpoints:
    """Each backend's ``ip:port`` and the way back, as last resolved."""

    def __init__(self) -> None:
        self._address: dict[str, str] = {}
        self._backend: dict[str, str] = {}

    def address(self, backend: str) -> str | None:
        return self._address.get(backend)

    def backend_at(self, address: str) -> str | None:
        return self._backend.get(address)

    def __len__(self) -> int:
        return len(self._address)

    async def resolve(self, backends: Iterable[BackendState]) -> None:
        """Resolve every backend's host (an address stays as it is); a name that does not
        resolve keeps its last address, or has none (the backend cannot be picked)."""
        loop = asyncio.get_running_loop()
        address: dict[str, str] = {}
        for backend in backends:
            url = urlsplit(backend.spec.url)
            host = url.hostname or ""
            port = url.port or (443 if url.scheme == "https" else 80)
            ip = _literal(host)
            if ip is None:
                try:
                    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
                except OSError as exc:
                    log.warning("backend %s: cannot resolve %s: %s", backend.name, host, exc)
                    kept = self._address.get(backend.name)
                    if kept is not None:
                        address[backend.name] = kept
                    continue
                ip = str(infos[0][4][0])
            address[backend.name] = _join(ip, port)
        self._address = address
        self._backend = {addr: name for name, addr in address.items()}
