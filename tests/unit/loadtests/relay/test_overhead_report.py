"""Issue 23's target checks of the overhead benchmark, on made-up points."""

from __future__ import annotations

from typing import Any

from loadtests.relay.overhead_report import check_targets_23, compare, format_targets_23


def point(
    delay: float, c: int, target: str, chunks: float, ttft: float, us: float | None
) -> dict[str, Any]:
    return {
        "delay_ms": delay,
        "concurrency": c,
        "target": target,
        "chunks_per_s": chunks,
        "ttft_p50_ms": ttft,
        "ttft_p99_ms": ttft * 2,
        "proxy_cpu_us_per_chunk": us,
        "chunks_per_proxy_core_s": None if us is None else 1e6 / us,
    }


def run(gateway_us: float, gateway_ttft: float, before_chunks: float) -> list[dict[str, Any]]:
    points = []
    for delay in (0.0, 10.0):
        for c in (1, 32, 64, 256):
            points += [
                point(delay, c, "direct", 1000, 1.0, None),
                point(delay, c, "yardstick", 900, 1.8, 13.0),
                point(delay, c, "rust-router", 950, 1.5, 12.0),
                point(delay, c, "gateway", 1000, gateway_ttft, gateway_us),
                point(delay, c, "gateway-before", before_chunks, 2.5, 17.0),
            ]
    return points


def test_every_target_of_issue_23_is_checked_for_the_gateway_only() -> None:
    points = run(gateway_us=11.0, gateway_ttft=1.4, before_chunks=1000)
    checks = check_targets_23(points, compare(points))
    keys = {(c["check"], c["delay_ms"], c["concurrency"]) for c in checks}
    assert keys == {
        ("chunks per proxy core-second vs Rust router", 0.0, 64),
        ("added TTFT p50 (ms)", 10.0, 1),
        ("added TTFT p50 (ms)", 10.0, 32),
        ("chunks/s vs gateway-before", 0.0, 256),
        ("chunks/s vs gateway-before", 10.0, 256),
    }
    assert {c["target"] for c in checks} == {"gateway"}
    assert all(c["met"] for c in checks)
    assert "NOT MET" not in format_targets_23(checks)


def test_misses_are_reported_with_their_figures() -> None:
    points = run(gateway_us=13.0, gateway_ttft=1.6, before_chunks=1100)
    checks = {
        (c["check"], c["delay_ms"], c["concurrency"]): c
        for c in check_targets_23(points, compare(points))
    }
    core = checks[("chunks per proxy core-second vs Rust router", 0.0, 64)]
    assert not core["met"] and round(core["value"]) == 76923 and round(core["limit"]) == 83333
    ttft = checks[("added TTFT p50 (ms)", 10.0, 1)]
    assert not ttft["met"] and abs(ttft["value"] - 0.6) < 1e-9
    assert not checks[("chunks/s vs gateway-before", 0.0, 256)]["met"]
    assert "NOT MET" in format_targets_23(list(checks.values()))
