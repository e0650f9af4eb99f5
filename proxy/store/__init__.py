"""Fleet state shared between gateway replicas: one interface, memory and Redis behind it.

``RedisStore`` lives in ``proxy.store.redis`` and is imported only where Redis is
configured (the redis client is not loaded otherwise).
"""

from proxy.store.base import LogEntry, Record, SharedPrefix, SharedPrefixes, Store, StoreHealth
from proxy.store.memory import MemoryStore

__all__ = [
    "LogEntry",
    "MemoryStore",
    "Record",
    "SharedPrefix",
    "SharedPrefixes",
    "Store",
    "StoreHealth",
]
