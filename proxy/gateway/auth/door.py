"""The front door: who is calling (API key -> tenant) and whether their limits allow it.

Open mode (no keys file) lets everyone in unmetered, as ``make run`` always did. With keys,
every public request names a key (``Authorization: Bearer``); an admitted request holds an
:class:`Admission` until its response is over, which settles the tokens it reserved
against the usage the backend reported and frees its concurrency slot.
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass
from pathlib import Path

from proxy.errors import GatewayError
from proxy.gateway.auth.keys import KeyRing, KeysError, Tenant
from proxy.gateway.auth.limiter import Ask, Limiter, Quota, Verdict
from proxy.gateway.auth.metrics import TenantMetrics

Headers = list[tuple[bytes, bytes]]

log = logging.getLogger("specroute.auth")


def openai_duration(seconds: float) -> str:
    """A duration as OpenAI's ``x-ratelimit-reset-*`` headers write it: ``12ms``, ``1.5s``,
    ``6m0s``."""
    if seconds < 1:
        return f"{max(math.ceil(seconds * 1000), 0)}ms"
    if seconds < 60:
        return f"{math.ceil(seconds * 1000) / 1000:g}s"
    minutes, rest = divmod(math.ceil(seconds), 60)
    return f"{minutes}m{rest}s"


def quota_headers(requests: Quota | None, tokens: Quota | None) -> Headers:
    headers: Headers = []
    for name, quota in (("requests", requests), ("tokens", tokens)):
        if quota is None:
            continue
        headers += [
            (f"x-ratelimit-limit-{name}".encode(), str(quota.limit).encode()),
            (f"x-ratelimit-remaining-{name}".encode(), str(max(quota.remaining, 0)).encode()),
            (f"x-ratelimit-reset-{name}".encode(), openai_duration(quota.reset_s).encode()),
        ]
    return headers


def _refusal(tenant: Tenant, ask: Ask, verdict: Verdict) -> GatewayError:
    limits = tenant.limits
    if verdict.refused_by == "concurrency":
        message = (
            f"Rate limit reached for tenant {tenant.name} on concurrent requests: "
            f"limit {limits.concurrent_requests}. Please try again when one finishes."
        )
    elif verdict.refused_by == "tokens" and ask.tokens > (limits.tokens_per_minute or 0):
        message = (
            f"Request too large for tenant {tenant.name}: it needs {ask.tokens} tokens "
            f"(prompt estimate plus max_tokens), over the limit of "
            f"{limits.tokens_per_minute} tokens per minute. Lower max_tokens."
        )
    else:
        per_minute = (
            limits.requests_per_minute
            if verdict.refused_by == "requests"
            else limits.tokens_per_minute
        )
        message = (
            f"Rate limit reached for tenant {tenant.name} on {verdict.refused_by} per minute: "
            f"limit {per_minute}. Please try again in {verdict.retry_after_s:.3g}s."
        )
    retry = max(verdict.retry_after_s, 0.001)
    headers = [
        (b"retry-after", str(math.ceil(retry)).encode()),
        # The OpenAI SDKs read this one first: the exact wait, not rounded up to a second.
        (b"retry-after-ms", str(math.ceil(retry * 1000)).encode()),
        *quota_headers(verdict.requests, verdict.tokens),
    ]
    return GatewayError(429, message, code="rate_limit_exceeded", headers=headers)


@dataclass(slots=True)
class Admission:
    """An admitted request of one tenant, holding its reservation until :meth:`close`."""

    tenant: Tenant
    model: str
    ask: Ask
    headers: Headers
    _door: FrontDoor
    _closed: bool = False

    async def close(
        self,
        *,
        endpoint: str,
        label: str,
        pool: str,
        ok: bool,
        prompt_tokens: int | None,
        completion_tokens: int | None,
    ) -> None:
        """Settle the tokens against the usage (if the backend reported any), free the
        slot and count the tenant's usage. Idempotent."""
        if self._closed:
            return
        self._closed = True
        door = self._door
        try:
            if prompt_tokens is not None or completion_tokens is not None:
                used = (prompt_tokens or 0) + (completion_tokens or 0)
                await door.limiter.settle(self.ask, used - self.ask.tokens)
        finally:
            await door.limiter.release(self.ask)
        door.metrics.record(
            self.tenant.name,
            self.model,
            endpoint,
            label,
            pool,
            ok,
            prompt_tokens,
            completion_tokens,
        )


class FrontDoor:
    def __init__(
        self,
        keys: KeyRing | None,
        limiter: Limiter,
        metrics: TenantMetrics,
        keys_path: Path | None = None,
    ) -> None:
        self.keys = keys
        self.limiter = limiter
        self.metrics = metrics
        # Where ``keys`` came from, so a rotation (a new key, a revoked one, a Kubernetes
        # Secret remounted) takes effect without restarting the gateway.
        self._keys_path = keys_path
        self._keys_mtime = _mtime(keys_path) if keys_path is not None else None

    @property
    def open(self) -> bool:
        return self.keys is None

    async def start(self) -> None:
        await self.limiter.start()

    async def close(self) -> None:
        await self.limiter.close()

    def reload_keys(self) -> bool:
        """Read the keys file again if it changed; ``True`` when new keys took effect.

        A file that cannot be used (half written, invalid) is refused and the keys in force
        keep serving: locking every tenant out over a typo is worse than a late revocation.
        Open mode stays open: a gateway started without a keys file is not turned into a
        closed one by a file appearing later.
        """
        path = self._keys_path
        if path is None or self.keys is None:
            return False
        mtime = _mtime(path)
        if mtime is None or mtime == self._keys_mtime:
            return False
        self._keys_mtime = mtime
        try:
            keys = KeyRing.load(path)
        except KeysError as exc:
            self.metrics.keys_reloaded(ok=False)
            log.error("keys file change refused, the previous keys keep serving: %s", exc)
            return False
        self.keys = keys
        self.metrics.keys_reloaded(ok=True)
        log.info("keys file reloaded: %d keys", len(keys))
        return True

    async def watch_keys(self, interval_s: float) -> None:
        """Poll the keys file's mtime (works on every filesystem, Secret volumes included)."""
        while True:
            await asyncio.sleep(interval_s)
            self.reload_keys()

    def authenticate(self, authorization: str | None) -> Tenant | None:
        """The caller's tenant; ``None`` in open mode. 401 for a missing or unknown key."""
        if self.keys is None:
            return None
        scheme, _, key = (authorization or "").partition(" ")
        key = key.strip()
        if scheme.lower() != "bearer" or not key:
            self.metrics.refused("", "missing_key")
            raise GatewayError(
                401,
                "You didn't provide an API key. You need to provide your API key in an "
                "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                code="invalid_api_key",
            )
        tenant = self.keys.tenant_for(key)
        if tenant is None:
            self.metrics.refused("", "invalid_key")
            raise GatewayError(
                401,
                f"Incorrect API key provided: {_redact(key)}.",
                code="invalid_api_key",
            )
        return tenant

    def check_model(self, tenant: Tenant | None, model: str) -> None:
        """A model outside the tenant's list answers as OpenAI does for one it cannot
        see: 404, so the list of models is not disclosed either."""
        if tenant is not None and not tenant.allows(model):
            self.metrics.refused(tenant.name, "model")
            raise GatewayError(
                404,
                f"The model `{model}` does not exist or you do not have access to it.",
                param="model",
                code="model_not_found",
            )

    async def admit(
        self, tenant: Tenant | None, model: str, tokens: int, request_id: str
    ) -> Admission | None:
        """Room for one request of ``tokens`` (reserved) on ``model``, or 429."""
        if tenant is None:
            return None
        self.check_model(tenant, model)
        limits = tenant.limits
        ask = Ask(
            tenant.name,
            request_id,
            max(tokens, 1),
            limits.requests_per_minute,
            limits.tokens_per_minute,
            limits.concurrent_requests,
        )
        if ask.requests_per_minute is ask.tokens_per_minute is ask.concurrent is None:
            return Admission(tenant, model, ask, [], self)  # a tenant without limits
        verdict = await self.limiter.acquire(ask)
        if not verdict.allowed:
            self.metrics.refused(tenant.name, verdict.refused_by or "limit")
            raise _refusal(tenant, ask, verdict)
        return Admission(tenant, model, ask, quota_headers(verdict.requests, verdict.tokens), self)


def _redact(key: str) -> str:
    """OpenAI's way of naming a wrong key: its first and last characters only."""
    return key[:3] + "*" * 4 + key[-4:] if len(key) > 8 else "*" * len(key)


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None
