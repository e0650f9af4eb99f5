"""API keys and the tenants they belong to, read from a keys file.

Keys are stored as the SHA-256 of the key (hex), never in clear: the file can be read by
whoever deploys the gateway without handing out working keys, and a leaked copy of it lets
no one in. A key is a bearer token; SHA-256 without salt is enough because keys are long
random strings (``specroute keys new`` makes 32 random bytes), not passwords to brute-force.
"""

from __future__ import annotations

import hashlib
import secrets
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


def hash_key(key: str) -> str:
    """The stored form of an API key: SHA-256 of its UTF-8 bytes, lower-case hex."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key() -> str:
    """A fresh API key in OpenAI's look (``sk-`` and 43 URL-safe characters)."""
    return "sk-" + secrets.token_urlsafe(32)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TenantLimits(_Strict):
    """A tenant's limits; each one left out is not enforced."""

    requests_per_minute: int | None = Field(default=None, ge=1)
    tokens_per_minute: int | None = Field(
        default=None,
        ge=1,
        description="prompt (estimated) plus max_tokens reserved, settled from usage",
    )
    concurrent_requests: int | None = Field(default=None, ge=1)
    models: list[str] = Field(default_factory=list, description="allowed models; empty: all")


class KeyEntry(_Strict):
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="hash_key() of the key")
    tenant: str
    label: str = ""


class KeysFile(_Strict):
    tenants: dict[str, TenantLimits] = Field(default_factory=dict)
    keys: list[KeyEntry] = Field(default_factory=list)

    @model_validator(mode="after")
    def _known_tenants(self) -> KeysFile:
        unknown = sorted({k.tenant for k in self.keys} - set(self.tenants))
        if unknown:
            raise ValueError(f"keys name tenants that are not declared: {', '.join(unknown)}")
        return self


class Tenant(_Strict):
    name: str
    limits: TenantLimits

    def allows(self, model: str) -> bool:
        return not self.limits.models or model in self.limits.models


class KeysError(ValueError):
    """A keys file that cannot be used; the message names the file and the problems."""


class KeyRing:
    """Key hash -> tenant, from one keys file."""

    def __init__(self, keys: KeysFile) -> None:
        tenants = {name: Tenant(name=name, limits=limits) for name, limits in keys.tenants.items()}
        self._by_hash = {entry.sha256: tenants[entry.tenant] for entry in keys.keys}

    @classmethod
    def load(cls, path: Path) -> KeyRing:
        try:
            data = yaml.safe_load(path.read_bytes())
        except OSError as exc:
            raise KeysError(f"{path}: cannot read: {exc.strerror}") from exc
        except yaml.YAMLError as exc:
            raise KeysError(f"{path}: not valid YAML/JSON: {exc}") from exc
        try:
            return cls(KeysFile.model_validate(data or {}))
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '<document>'}: {e['msg']}"
                for e in exc.errors()
            )
            raise KeysError(f"{path}: invalid keys file: {problems}") from exc

    def tenant_for(self, key: str) -> Tenant | None:
        # A dict lookup on the hash, not a compare of keys: timing can at most tell how
        # close the SHA-256 of a guess came to a stored one, which says nothing of the key.
        return self._by_hash.get(hash_key(key))

    def __len__(self) -> int:
        return len(self._by_hash)
