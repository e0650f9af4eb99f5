"""What the gateway sends a backend to be let in: its API key and extra headers.

The policy names where a key is (``api_key_env``, ``api_key_file``); it is read here, when a
policy is validated and applied, never on the request path, and kept only in
:class:`BackendAuth`, whose ``repr`` does not show it (so a log line or a traceback that
prints one cannot leak it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from proxy.policy.schema import BackendSpec, Policy


@dataclass(frozen=True, slots=True)
class BackendAuth:
    """The headers one backend gets on every request (its key as a bearer token)."""

    headers: tuple[tuple[str, str], ...] = ()
    has_key: bool = field(default=False)

    def __repr__(self) -> str:
        names = ", ".join(name for name, _ in self.headers)
        return f"BackendAuth(headers=[{names}], has_key={self.has_key})"


def _read_key(spec: BackendSpec, environ: Mapping[str, str]) -> str | None:
    if spec.api_key_env is not None:
        key = environ.get(spec.api_key_env, "").strip()
        if not key:
            raise ValueError(
                f"backends.{spec.name}.api_key_env: environment variable "
                f"{spec.api_key_env} is not set (or empty)"
            )
        return key
    if spec.api_key_file is not None:
        try:
            key = Path(spec.api_key_file).read_text().strip()
        except OSError as exc:
            raise ValueError(
                f"backends.{spec.name}.api_key_file: cannot read {spec.api_key_file}: "
                f"{exc.strerror}"
            ) from exc
        if not key:
            raise ValueError(f"backends.{spec.name}.api_key_file: {spec.api_key_file} is empty")
        return key
    return None


def backend_auth(spec: BackendSpec, environ: Mapping[str, str] | None = None) -> BackendAuth:
    key = _read_key(spec, os.environ if environ is None else environ)
    headers = list(spec.headers.items())
    if key is not None:
        headers.append(("authorization", f"Bearer {key}"))
    return BackendAuth(tuple(headers), key is not None)


def resolve_credentials(
    policy: Policy, environ: Mapping[str, str] | None = None
) -> dict[str, BackendAuth]:
    """Every backend's credentials; ValueError naming each backend whose key is missing."""
    problems: list[str] = []
    resolved: dict[str, BackendAuth] = {}
    for spec in policy.backends:
        try:
            resolved[spec.name] = backend_auth(spec, environ)
        except ValueError as exc:
            problems.append(str(exc))
    if problems:
        raise ValueError("; ".join(problems))
    return resolved


class BackendCredentials:
    """Every backend's :class:`BackendAuth` under the active policy (a policy listener:
    swapped with the policy, read on the request path as a dict lookup)."""

    def __init__(self, policy: Policy) -> None:
        self._by_backend = resolve_credentials(policy)

    def on_policy(self, policy: Policy) -> None:
        self._by_backend = resolve_credentials(policy)

    def for_backend(self, name: str) -> BackendAuth:
        return self._by_backend.get(name) or _NONE


_NONE = BackendAuth()
