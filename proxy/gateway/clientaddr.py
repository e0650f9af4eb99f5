"""Who the client is, when reverse proxies stand in between.

``X-Forwarded-For`` is believed only from the addresses the operator named
(``trusted_proxies``): anyone can send the header, and a proxy on the same host makes
every remote client look like loopback. Walking the header from the right, the first
address that is not a trusted proxy is the client; a trusted proxy that names no one
leaves the client unknown (never loopback).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, MutableMapping, Sequence
from typing import Any

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def trusted_networks(entries: Iterable[str]) -> list[Network]:
    return [ipaddress.ip_network(entry, strict=False) for entry in entries]


def _trusted(host: str, networks: Sequence[Network]) -> bool:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(address in network for network in networks)


def client_host(scope: MutableMapping[str, Any], networks: Sequence[Network]) -> str | None:
    """The client's address, or ``None`` when a trusted proxy did not say who it is."""
    peer = scope.get("client")
    host: str | None = peer[0] if peer else None
    if host is None or not _trusted(host, networks):
        return host
    forwarded: list[str] = []
    for name, value in scope.get("headers", ()):
        if name == b"x-forwarded-for":
            forwarded += [part.strip() for part in value.decode("latin-1").split(",")]
    for hop in reversed(forwarded):
        if hop and not _trusted(hop, networks):
            return hop
    return None
