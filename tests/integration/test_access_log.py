"""The access line and the traffic log name the caller's tenant (from its API key)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import openai
import orjson
import pytest

from proxy.settings import Settings
from proxy.sim.config import SimConfig
from proxy.sim.server import run_sim_in_thread
from tests.gateway_rig import run_gateway, sim_backend, write_policy
from tests.integration.test_front_door import GOOD, MODEL, write_keys


def test_access_line_and_traffic_log_carry_the_tenant(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="specroute.access")
    traffic = tmp_path / "traffic.jsonl"
    with run_sim_in_thread(SimConfig()) as sim:
        policy = write_policy(
            tmp_path / "p.yaml", {"backends": [sim_backend("b", sim.url, "plain")]}
        )
        keys = write_keys(tmp_path / "keys.yaml", {"search-team": {}}, {GOOD: "search-team"})
        settings = Settings(
            policy_path=policy,
            port=0,
            keys_file=keys,
            access_log=True,
            traffic_log_path=traffic,
        )
        with run_gateway(settings) as gw:
            client = openai.OpenAI(base_url=gw.url + "/v1", api_key=GOOD, max_retries=0)
            client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": "hi"}],
                max_tokens=4,
                extra_headers={"x-request-id": "req-access-1"},
            )
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not (
                traffic.exists() and traffic.read_text().strip()
            ):
                time.sleep(0.05)
    lines = [r for r in caplog.records if r.name == "specroute.access"]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    fields = lines[0].access  # type: ignore[attr-defined]
    assert fields["request_id"] == "req-access-1"
    assert fields["tenant"] == "search-team"
    assert fields["backend"] == "b" and fields["status"] == 200
    assert fields["completion_tokens"] == 4
    assert "tenant=search-team" in lines[0].getMessage()
    records = [orjson.loads(line) for line in traffic.read_text().splitlines()]
    assert [r["tenant"] for r in records] == ["search-team"]


def test_no_access_line_unless_asked(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="specroute.access")
    with run_sim_in_thread(SimConfig()) as sim:
        policy = write_policy(
            tmp_path / "p.yaml", {"backends": [sim_backend("b", sim.url, "plain")]}
        )
        with run_gateway(Settings(policy_path=policy, port=0)) as gw:
            client = openai.OpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0)
            client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2
            )
    assert not [r for r in caplog.records if r.name == "specroute.access"]
