"""Where each piece of shared state lives in Redis (one prefix per deployment)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Keys:
    prefix: str
    replica_id: str

    @property
    def live(self) -> str:
        """Sorted set: replica id -> last heartbeat (Redis server time, ms)."""
        return f"{self.prefix}live"

    @property
    def inflight_prefix(self) -> str:
        return f"{self.prefix}inflight:"

    @property
    def inflight(self) -> str:
        """Hash: backend -> this replica's open requests (leased: expires with the replica)."""
        return f"{self.inflight_prefix}{self.replica_id}"

    @property
    def inflight_seq(self) -> str:
        """Hash: backend -> sequence number of the last write, so stale writes lose."""
        return f"{self.prefix}inflight-seq:{self.replica_id}"

    @property
    def prefixes(self) -> str:
        """Stream: which backend served which prompt-prefix chunks (the shared prefix index)."""
        return f"{self.prefix}prefixes"

    def log(self, name: str) -> str:
        return f"{self.prefix}log:{name}"

    def doc(self, key: str) -> str:
        return f"{self.prefix}doc:{key}"

    def channel(self, name: str) -> str:
        return f"{self.prefix}chan:{name}"
