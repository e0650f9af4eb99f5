"""The picker benchmark's harness (issue 37): Envoy alone, Envoy with the picker (one backend
and several), the gateway, each measured at every point of the reduced run with intact
streams and each relay's CPU counted; the targets checked and printed.

Speed is not asserted here (the machine is shared); only the shape and sanity of the figures.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from loadtests.relay.picker_overhead import QUICK
from loadtests.tools.envoy_face import EXT_PROC, envoy_config
from loadtests.tools.processes import ROOT

TARGETS = ("direct", "envoy", "envoy-picker", "envoy-picker-fd", "envoy-picker-64", "gateway")
PICKERS = ("envoy-picker", "envoy-picker-fd", "envoy-picker-64")


def _filters(config: dict[str, object]) -> list[str]:
    listener = config["static_resources"]["listeners"][0]  # type: ignore[index]
    hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
    return [f["name"] for f in hcm["http_filters"]]


def test_envoy_alone_routes_to_the_stub_without_the_picker() -> None:
    alone = envoy_config(10001, 10002, stub_port=10003)
    assert EXT_PROC not in _filters(alone)
    hcm = alone["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    assert hcm["typed_config"]["route_config"]["virtual_hosts"][0]["routes"][0]["route"][
        "cluster"
    ] == ("stub")
    stub = next(c for c in alone["static_resources"]["clusters"] if c["name"] == "stub")
    assert stub["type"] == "STATIC"
    assert stub["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"] == {
        "socket_address": {"address": "127.0.0.1", "port_value": 10003}
    }

    deployed = envoy_config(10001, 10002, picker_port=10004)
    assert EXT_PROC in _filters(deployed)
    headers_only = envoy_config(10001, 10002, picker_port=10004, response_body=False)
    hcm = headers_only["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    ext_proc = next(f for f in hcm["typed_config"]["http_filters"] if f["name"] == EXT_PROC)
    assert ext_proc["typed_config"]["processing_mode"]["response_body_mode"] == "NONE"


@pytest.mark.timeout(90)
def test_quick_run_measures_every_contender_and_checks_the_targets(tmp_path: Path) -> None:
    out = tmp_path / "picker.json"
    # The Rust router is left out: it may not be installed where the tests run.
    args = ["--quick", "--no-router", "--duration", "0.25", "--backends", "4", "--json", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "bench", "picker-overhead", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=80,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = orjson.loads(out.read_bytes())
    printed = proc.stdout

    points = {(p["delay_ms"], p["concurrency"], p["target"]): p for p in results["points"]}
    expected = {(d, c, t) for d in QUICK.delays_ms for c in QUICK.concurrencies for t in TARGETS}
    assert set(points) == expected
    for key, p in points.items():
        assert p["errors"] == {} and p["bad_streams"] == 0, key
        assert p["events"] > 0 and p["ttft_samples"] >= 1, key
        if key[2] == "direct":
            assert p["relay_cpu_us_per_chunk"] is None
        elif key[2] in PICKERS:
            # Envoy's and the picker's CPU, both counted, summed.
            assert p["front_cpu_us_per_chunk"] > 0 and p["picker_cpu_us_per_chunk"] > 0, key
            assert p["relay_cpu_us_per_chunk"] == pytest.approx(
                p["front_cpu_us_per_chunk"] + p["picker_cpu_us_per_chunk"]
            )
            assert 0 < p["picker_share"] < 1
        else:
            assert p["relay_cpu_us_per_chunk"] > 0 and p["picker_cpu_us_per_chunk"] is None, key

    decisions = {d["target"]: d for d in results["decisions"]}
    assert set(decisions) == {"envoy-picker", "envoy-picker-fd", "envoy-picker-64", "gateway"}
    for target, d in decisions.items():
        assert d["chunks"] == QUICK.decision_chunks and d["bad_streams"] == 0, target
        assert d["requests_per_decider_core_s"] > 0, target

    assert set(results["figures"]) == set(TARGETS) - {"direct"}
    assert results["figures"]["envoy-picker"]["decisions"] > 0
    # The quick run has no delay and only the latency levels: TTFT checks only, each a verdict.
    checks = {(t["target"], t["concurrency"], t["check"]) for t in results["targets"]}
    assert {(t, c) for t, c, _ in checks} == {(t, c) for t in PICKERS for c in (1, 32)}
    assert all(isinstance(t["met"], bool) for t in results["targets"])
    assert "targets of issue 37" in printed
    assert "picker / gateway" in printed
    assert "rust-router left out" in printed
