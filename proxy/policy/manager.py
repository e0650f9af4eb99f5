"""The active policy: validated swaps, rollback, file watching, and fleet-wide reloads.

A new policy is parsed, validated and its plugins built *before* anything changes; then
every component takes it in one synchronous step (no await in between), so no request sees
half of two policies. With a shared store the accepted policy text is stored and announced,
and every replica loads it.

Backends found outside the document (Kubernetes pods, :mod:`proxy.discovery`) are added to
every policy by a :class:`BackendSource` on the way in, so a reload keeps them and a change
in them goes through the same checks and swap (:meth:`PolicyManager.reapply`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from proxy.policy import Policy, PolicyError, parse_policy
from proxy.store import Store

log = logging.getLogger("specroute.policy")

CHANNEL = "policy"
DOC_KEY = "policy:active"


class BackendSource(Protocol):
    """Backends the policy document does not list (discovered pods), added to it."""

    def expand(self, policy: Policy) -> Policy:
        """``policy`` with these backends added, validated as one document; raises
        ValueError when the two do not fit together (a name taken twice)."""
        ...


@dataclass(frozen=True, slots=True)
class PolicyVersion:
    policy: Policy
    text: str
    source: str
    digest: str

    @classmethod
    def of(cls, text: str, source: str) -> PolicyVersion:
        policy = parse_policy(text, source)
        return cls(policy, text, source, hashlib.sha256(text.encode()).hexdigest()[:12])


class PolicyManager:
    def __init__(
        self,
        initial: PolicyVersion,
        apply: Callable[[Policy], None],
        validate: Callable[[Policy], None],
        store: Store,
        path: Path | None = None,
        history: int = 10,
        discovered: BackendSource | None = None,
    ) -> None:
        self._discovered = discovered
        self._apply = apply
        self._validate = validate
        self._store = store
        self._path = path
        self._history_size = history
        self.current = initial
        self.history: list[PolicyVersion] = []
        self._mtime: float | None = None

    def _checked(self, version: PolicyVersion) -> Policy:
        """The policy that would be in force: the document with the discovered backends."""
        try:
            policy = version.policy
            if self._discovered is not None:
                policy = self._discovered.expand(policy)
            self._validate(policy)
        except ValueError as exc:
            raise PolicyError(version.source, [str(exc)]) from exc
        return policy

    def check(self, text: str, source: str) -> PolicyVersion:
        """Everything :meth:`load_text` checks, without applying (a dry run)."""
        version = PolicyVersion.of(text, source)
        self._checked(version)
        return version

    def _swap(self, version: PolicyVersion, *, remember: bool = True, why: str = "") -> None:
        self._apply(self._checked(version))
        if remember:
            self.history.append(self.current)
            del self.history[: -self._history_size]
        self.current = version
        log.info("policy %s from %s in force%s", version.digest, version.source, why)

    def reapply(self, reason: str) -> None:
        """Swap the policy in force in again, through every check: what the backend source
        adds to it changed. Not announced (each replica discovers for itself) nor kept in the
        history (the document is the same). Raises PolicyError and keeps what is in force."""
        self._swap(self.current, remember=False, why=f" ({reason})")

    async def load_text(self, text: str, source: str, *, broadcast: bool = True) -> PolicyVersion:
        """Validate and swap in policy text; raises PolicyError and keeps the old one."""
        version = PolicyVersion.of(text, source)
        if version.digest == self.current.digest:
            return version
        self._swap(version)
        if broadcast:
            await self._announce()
        return version

    async def rollback(self) -> PolicyVersion:
        if not self.history:
            raise PolicyError("rollback", ["no previous policy to roll back to"])
        previous = self.history.pop()
        self._swap(previous, remember=False)
        await self._announce()
        return previous

    async def _announce(self) -> None:
        doc: dict[str, Any] = {
            "text": self.current.text,
            "source": self.current.source,
            "digest": self.current.digest,
            "replica": self._store.replica_id,
        }
        try:
            await self._store.put_doc(DOC_KEY, doc)
            await self._store.publish(CHANNEL, {"digest": self.current.digest})
        except Exception:  # a degraded store must not undo a local reload
            log.warning("policy %s applied locally; could not announce it", self.current.digest)

    async def _adopt_shared(self) -> None:
        doc = await self._store.get_doc(DOC_KEY)
        if not doc or doc.get("digest") == self.current.digest:
            return
        try:
            version = PolicyVersion.of(str(doc["text"]), f"replica {doc.get('replica')}")
            self._swap(version)
        except PolicyError as exc:
            log.error("ignoring shared policy %s: %s", doc.get("digest"), exc)

    async def follow_store(self) -> None:
        """Apply policies other replicas announce (and the one in force at start)."""
        await self._adopt_shared()
        async for _ in self._store.subscribe(CHANNEL):
            await self._adopt_shared()

    async def watch_file(self, interval_s: float) -> None:
        """Reload the policy file when it changes (mtime poll: works on every filesystem)."""
        if self._path is None:
            return
        path = self._path
        self._mtime = _mtime(path)
        while True:
            await asyncio.sleep(interval_s)
            mtime = _mtime(path)
            if mtime is None or mtime == self._mtime:
                continue
            self._mtime = mtime
            try:
                text = path.read_text()
                await self.load_text(text, str(path))
            except (PolicyError, OSError) as exc:
                log.error("policy file change refused, previous policy keeps serving: %s", exc)


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime_ns / 1e9
    except OSError:
        return None
