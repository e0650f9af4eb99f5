"""Exchanges whose end Envoy reports in its access log rather than on the ext_proc stream.

With the response body kept out of the picker (``response_body_mode: NONE``), Envoy closes
the ext_proc stream right after the response headers: the stream's end then says nothing of
the response's. Envoy's gRPC access log (``envoy.access_loggers.http_grpc``, served by
:mod:`proxy.epp.accesslog`) reports every request once it is over, with its status and
whether the client or the upstream cut it. Such an exchange waits here, under the request
id the pick set on the upstream request (Envoy logs it as ``request_id``), until its entry
comes.

A response the picker must read all the same (a shadow sample, a tenant's usage) is copied
to it by a second ext_proc filter (the reading filter: observability mode, enabled on a
marked route), on a stream of its own: that exchange closes once both the entry and the
copy's end are in. The copy's last chunk goes out as the response ends and the entry a
flush interval later, so the copy is normally in first; an entry that finds it still
running waits ``read_grace_s`` for it.

An entry that never comes must not hold a request in flight for ever. An Envoy that dies
takes its entries with it: each exchange remembers the gRPC connection its pick came on
(``peer``: one Envoy worker's connection to the picker carries both its ext_proc streams
and its access log stream), and when that connection's access log stream ends and none
opens again from it within ``orphan_grace_s``, its exchanges are closed as incomplete
(:meth:`EndLedger.log_stream_closed`). Whatever is left (an Envoy that died before its
first flush, a dropped buffer) :meth:`EndLedger.sweep` closes after ``max_wait_s``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from proxy.epp.seams import Exchange

log = logging.getLogger("specroute.epp")


@dataclass(slots=True)
class _Waiting:
    exchange: Exchange
    since: float
    # Whether the body passes the reading filter, and whether that stream is over.
    read: bool = False
    read_over: bool = False
    # The access log's verdict, once its entry came.
    verdict: bool | None = None
    # The gRPC connection the pick came on (Envoy's worker), "" when unknown.
    peer: str = ""


class EndLedger:
    """The exchanges waiting for their access log entry, by request id."""

    def __init__(
        self,
        max_wait_s: float = 900.0,
        read_grace_s: float = 2.0,
        orphan_grace_s: float = 3.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_wait_s = max_wait_s
        self.read_grace_s = read_grace_s
        self.orphan_grace_s = orphan_grace_s
        self._clock = clock
        self._waiting: dict[str, _Waiting] = {}
        # Open access log streams per connection (an Envoy worker's).
        self._log_streams: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def expect(self, key: str, exchange: Exchange, *, read: bool = False, peer: str = "") -> None:
        """``exchange`` ends when the entry for ``key`` comes (and, when ``read``, the
        reading filter's stream of its body has ended), when ``peer``'s access log is
        gone for good, or at the sweep."""
        self._waiting[key] = _Waiting(exchange, self._clock(), read, peer=peer)

    def log_stream_opened(self, peer: str) -> None:
        """An access log stream from ``peer`` began."""
        self._log_streams[peer] = self._log_streams.get(peer, 0) + 1

    def log_stream_closed(self, peer: str) -> None:
        """An access log stream from ``peer`` ended. With none left open, the entries of
        that connection's exchanges may never come (its Envoy died): unless a stream from
        it opens again within ``orphan_grace_s`` (Envoy reopens one on its next flush when
        only the stream failed), they are closed as incomplete."""
        left = self._log_streams.get(peer, 0) - 1
        if left > 0:
            self._log_streams[peer] = left
            return
        self._log_streams.pop(peer, None)
        asyncio.get_running_loop().call_later(self.orphan_grace_s, self._orphaned, peer)

    def _orphaned(self, peer: str) -> None:
        if not peer or peer in self._log_streams:
            return
        keys = [k for k, w in self._waiting.items() if w.peer == peer and w.verdict is None]
        for key in keys:
            self._close(key, False)
        if keys:
            log.warning(
                "%d responses released as cut: the access log of Envoy connection %s ended",
                len(keys),
                peer,
            )

    def reading(self, key: str) -> Exchange | None:
        """The exchange the body read under ``key`` goes through; ``None`` if none waits."""
        waiting = self._waiting.get(key)
        return waiting.exchange if waiting is not None and waiting.read else None

    def read_done(self, key: str) -> None:
        """The reading filter's stream under ``key`` ended (whole or cut)."""
        waiting = self._waiting.get(key)
        if waiting is None or not waiting.read:
            return
        waiting.read_over = True
        if waiting.verdict is not None:
            self._close(key, waiting.verdict)

    def ended(self, key: str, complete: bool) -> bool:
        """The access log's word on ``key``: closes its exchange (once the reading of its
        body is over); false for a key nobody waits for (a request refused or passed through,
        or one already swept)."""
        waiting = self._waiting.get(key)
        if waiting is None or waiting.verdict is not None:
            return False
        waiting.verdict = complete
        if not waiting.read or waiting.read_over:
            self._close(key, complete)
        else:
            asyncio.get_running_loop().call_later(self.read_grace_s, self._close, key, complete)
        return True

    def sweep(self) -> int:
        """Close, as incomplete, the exchanges that waited longer than ``max_wait_s``."""
        limit = self._clock() - self.max_wait_s
        overdue = [key for key, w in self._waiting.items() if w.since < limit]
        for key in overdue:
            self._close(key, False)
        if overdue:
            log.warning("%d responses' ends never came in Envoy's access log", len(overdue))
        return len(overdue)

    def close_all(self) -> None:
        """The picker is stopping: whatever still waits is released as incomplete."""
        for key in list(self._waiting):
            self._close(key, False)

    def _close(self, key: str, complete: bool) -> None:
        waiting = self._waiting.pop(key, None)
        if waiting is None:
            return  # closed already (the reading's end and the grace timer may both come)
        try:
            waiting.exchange.close(complete)
        except Exception:
            log.exception("exchange.close failed")
