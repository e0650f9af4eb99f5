"""Assembling the public face for ``create_app``: the front door (keys, limits) and CORS."""

from __future__ import annotations

from collections.abc import Callable

from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp

from proxy.gateway.auth import FrontDoor, KeyRing, LocalLimiter, TenantMetrics
from proxy.gateway.auth.limiter import Limiter
from proxy.gateway.auth.redis import FleetLimiter, RedisLimiter
from proxy.metrics import GatewayMetrics
from proxy.policy import Policy
from proxy.policy.credentials import resolve_credentials
from proxy.settings import Settings

# Response headers a browser page may read (CORS hides all but a handful otherwise).
EXPOSED_HEADERS = [
    "x-request-id",
    "x-specroute-backend",
    "x-specroute-class",
    "x-specroute-route",
    "retry-after",
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
]


def build_door(settings: Settings, metrics: GatewayMetrics, redis_url: str | None) -> FrontDoor:
    """The front door: open without a keys file; with one, limits held in Redis when the
    gateway has one (fleet-wide), else by this process alone."""
    keys = KeyRing.load(settings.keys_file) if settings.keys_file is not None else None
    limiter: Limiter
    if keys is not None and redis_url:
        limiter = FleetLimiter(RedisLimiter(redis_url))
    else:
        limiter = LocalLimiter()
    return FrontDoor(keys, limiter, TenantMetrics(metrics.registry), settings.keys_file)


def validating_credentials(validate: Callable[[Policy], None]) -> Callable[[Policy], None]:
    """``validate`` and then the backends' keys: a policy naming a key that is not there is
    refused before it is applied, as any other invalid policy."""

    def check(policy: Policy) -> None:
        validate(policy)
        resolve_credentials(policy)

    return check


def cors(settings: Settings, app: ASGIApp) -> ASGIApp | None:
    """``app`` behind CORS when origins are configured (off by default)."""
    if not settings.cors_allow_origins:
        return None
    return CORSMiddleware(
        app,
        allow_origins=settings.cors_allow_origins,
        allow_methods=settings.cors_allow_methods,
        allow_headers=settings.cors_allow_headers,
        expose_headers=EXPOSED_HEADERS,
        max_age=600,
    )
