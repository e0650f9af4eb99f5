"""API keys, tenants and their limits: the gateway's front door."""

from proxy.gateway.auth.door import Admission, FrontDoor, openai_duration, quota_headers
from proxy.gateway.auth.keys import KeyRing, KeysError, Tenant, TenantLimits, hash_key, new_key
from proxy.gateway.auth.limiter import Ask, Limiter, LocalLimiter, Quota, Verdict
from proxy.gateway.auth.metrics import TenantMetrics

__all__ = [
    "Admission",
    "Ask",
    "FrontDoor",
    "KeyRing",
    "KeysError",
    "Limiter",
    "LocalLimiter",
    "Quota",
    "Tenant",
    "TenantLimits",
    "TenantMetrics",
    "Verdict",
    "hash_key",
    "new_key",
    "openai_duration",
    "quota_headers",
]
