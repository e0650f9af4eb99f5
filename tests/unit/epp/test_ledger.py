"""Exchanges waiting for Envoy's access log: closed once, by their entry or at the sweep."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from envoy.data.accesslog.v3 import accesslog_pb2

from proxy.epp.accesslog import complete
from proxy.epp.ledger import EndLedger


@dataclass
class Closing:
    closes: list[bool] = field(default_factory=list)

    def response_headers(self, status: int, headers: object, served: object) -> list[object]:
        return []

    def body(self, chunk: bytes, end: bool) -> bytes:
        return chunk

    def close(self, complete: bool) -> None:
        self.closes.append(complete)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_entry_closes_its_exchange_once() -> None:
    ledger = EndLedger()
    exchange = Closing()
    ledger.expect("rid-1", exchange)
    assert len(ledger) == 1
    assert ledger.ended("rid-1", True)
    assert not ledger.ended("rid-1", False)  # Envoy's second word on it changes nothing
    assert exchange.closes == [True] and len(ledger) == 0


def test_an_entry_nobody_waits_for_is_ignored() -> None:
    assert not EndLedger().ended("a refused request", True)


def test_the_sweep_closes_only_the_overdue_as_incomplete() -> None:
    clock = Clock()
    ledger = EndLedger(max_wait_s=60, clock=clock)
    old, new = Closing(), Closing()
    ledger.expect("old", old)
    clock.now += 50
    ledger.expect("new", new)
    clock.now += 11
    assert ledger.sweep() == 1
    assert old.closes == [False] and new.closes == [] and len(ledger) == 1


def test_stopping_releases_whatever_still_waits() -> None:
    ledger = EndLedger()
    exchanges = [Closing(), Closing()]
    for i, exchange in enumerate(exchanges):
        ledger.expect(f"rid-{i}", exchange)
    ledger.close_all()
    assert [e.closes for e in exchanges] == [[False], [False]] and len(ledger) == 0


def entry(status: int, **flags: bool) -> accesslog_pb2.HTTPAccessLogEntry:
    logged = accesslog_pb2.HTTPAccessLogEntry()
    logged.request.request_id = "rid"
    if status:
        logged.response.response_code.value = status
    for name, value in flags.items():
        setattr(logged.common_properties.response_flags, name, value)
    return logged


def test_a_response_is_whole_unless_a_flag_says_who_cut_it() -> None:
    assert complete(entry(200))
    assert complete(entry(503))  # an engine's error, answered whole
    assert not complete(entry(200, downstream_connection_termination=True))  # client left
    assert not complete(entry(200, downstream_remote_reset=True))
    assert not complete(entry(200, upstream_remote_reset=True))  # the engine reset
    assert not complete(entry(0, upstream_connection_failure=True))  # never answered


async def test_a_connection_whose_log_is_gone_releases_its_exchanges() -> None:
    ledger = EndLedger(orphan_grace_s=0.05)
    dead, alive, unknown = Closing(), Closing(), Closing()
    ledger.expect("a", dead, peer="ipv4:127.0.0.1:1111")
    ledger.expect("b", alive, peer="ipv4:127.0.0.1:2222")
    ledger.expect("c", unknown)  # no peer known: only the sweep may close it
    ledger.log_stream_opened("ipv4:127.0.0.1:1111")
    ledger.log_stream_opened("ipv4:127.0.0.1:2222")
    ledger.log_stream_closed("ipv4:127.0.0.1:1111")
    assert dead.closes == []  # not at once: the stream may come back
    await asyncio.sleep(0.2)
    assert dead.closes == [False]
    assert alive.closes == [] and unknown.closes == []
    assert len(ledger) == 2


async def test_a_log_stream_that_comes_back_in_time_keeps_its_exchanges() -> None:
    ledger = EndLedger(orphan_grace_s=0.05)
    exchange = Closing()
    peer = "ipv4:127.0.0.1:1111"
    ledger.expect("a", exchange, peer=peer)
    ledger.log_stream_opened(peer)
    ledger.log_stream_opened(peer)  # two streams on one connection: one ending is not enough
    ledger.log_stream_closed(peer)
    ledger.log_stream_closed(peer)
    ledger.log_stream_opened(peer)  # Envoy reopened it on its next flush
    await asyncio.sleep(0.2)
    assert exchange.closes == []
    assert ledger.ended("a", True) and exchange.closes == [True]
