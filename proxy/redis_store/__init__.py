"""The Redis implementation of :class:`proxy.store.Store` (several gateway replicas)."""

from proxy.redis_store.store import RedisStore

__all__ = ["RedisStore"]
