"""The Redis implementation of :class:`proxy.store.Store` (several gateway replicas)."""

from proxy.store.redis.store import RedisStore

__all__ = ["RedisStore"]
