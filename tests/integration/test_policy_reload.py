"""Hot reload of the routing policy: file watch, PUT, refusal of bad policies, rollback,
and the admin token."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from proxy.settings import Settings
from proxy.sim.config import SimConfig
from proxy.sim.server import SimServer, run_sim_in_thread
from tests.gateway_rig import run_gateway, sim_backend, write_policy

MODEL = "sim-llama-8b"


@pytest.fixture(scope="module")
def sims() -> Iterator[tuple[SimServer, SimServer]]:
    with (
        run_sim_in_thread(SimConfig()) as a,
        run_sim_in_thread(SimConfig(speculation="ngram", k=4)) as b,
    ):
        yield a, b


def policy(sims: tuple[SimServer, SimServer], concurrency: int = 64) -> dict[str, object]:
    return {
        "backends": [
            sim_backend("plain-0", sims[0].url, "plain"),
            sim_backend("ngram-0", sims[1].url, "ngram", "ngram", 4),
        ],
        "pools": {"ngram": {"break_even": {"concurrency": concurrency}}},
    }


def threshold(url: str, headers: dict[str, str] | None = None) -> float:
    pools = httpx.get(url + "/admin/break-even", headers=headers).json()["pools"]
    return float(pools[0]["threshold"])


def wait_until(check: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def test_file_edits_apply_and_bad_edits_are_refused(
    sims: tuple[SimServer, SimServer], tmp_path: Path
) -> None:
    path = write_policy(tmp_path / "p.yaml", policy(sims, 64))
    with run_gateway(Settings(policy_path=path, port=0, policy_poll_s=0.05)) as gw:
        assert threshold(gw.url) == 64
        write_policy(path, policy(sims, 12))
        wait_until(lambda: threshold(gw.url) == 12)
        # A broken edit: the previous policy keeps serving, requests keep flowing.
        path.write_text(yaml.safe_dump(policy(sims, 12)).replace("pool: ngram", "pool: [ngram"))
        time.sleep(0.5)
        assert threshold(gw.url) == 12
        resp = httpx.post(
            gw.url + "/v1/chat/completions",
            json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        )
        assert resp.status_code == 200


def test_put_rollback_and_errors(sims: tuple[SimServer, SimServer], tmp_path: Path) -> None:
    path = write_policy(tmp_path / "p.yaml", policy(sims, 64))
    with run_gateway(Settings(policy_path=path, port=0, watch_policy=False)) as gw:
        first = httpx.get(gw.url + "/admin/policy").json()["digest"]
        put = httpx.put(gw.url + "/admin/policy", content=yaml.safe_dump(policy(sims, 20)))
        assert put.status_code == 200
        assert threshold(gw.url) == 20
        bad = policy(sims, 20)
        bad["backends"][1]["speculation"] = {"method": "telepathy"}  # type: ignore[index]
        refused = httpx.put(gw.url + "/admin/policy", content=yaml.safe_dump(bad))
        assert refused.status_code == 400
        problems = refused.json()["error"]["problems"]
        assert any("backends.1.speculation.method" in p for p in problems)
        plugin = policy(sims, 20) | {"routing": {"scorers": [{"type": "no_such_scorer"}]}}
        assert (
            httpx.put(gw.url + "/admin/policy", content=yaml.safe_dump(plugin)).status_code == 400
        )
        assert threshold(gw.url) == 20
        back = httpx.post(gw.url + "/admin/policy/rollback")
        assert back.json()["digest"] == first
        assert threshold(gw.url) == 64
        assert httpx.post(gw.url + "/admin/policy/rollback").status_code == 400


def test_admin_token(sims: tuple[SimServer, SimServer], tmp_path: Path) -> None:
    path = write_policy(tmp_path / "p.yaml", policy(sims))
    with run_gateway(Settings(policy_path=path, port=0, admin_token="s3cret")) as gw:
        denied = httpx.get(gw.url + "/admin/fleet")
        assert denied.status_code == 401
        assert denied.json()["error"]["code"] == "invalid_admin_token"
        assert (
            httpx.get(
                gw.url + "/admin/fleet", headers={"authorization": "Bearer wrong"}
            ).status_code
            == 401
        )
        ok = httpx.get(gw.url + "/admin/fleet", headers={"authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        assert {b["name"] for b in ok.json()["backends"]} == {"plain-0", "ngram-0"}


def test_policy_validate_command(sims: tuple[SimServer, SimServer], tmp_path: Path) -> None:
    from proxy.cli import main

    good = write_policy(tmp_path / "good.yaml", policy(sims))
    assert main(["policy", "validate", str(good)]) == 0
    bad = write_policy(
        tmp_path / "bad.yaml", policy(sims) | {"routing": {"picker": {"type": "nope"}}}
    )
    assert main(["policy", "validate", str(bad)]) == 1


def test_a_policy_may_not_point_a_backend_or_a_plugin_outside_the_process_limits(
    sims: tuple[SimServer, SimServer], tmp_path: Path
) -> None:
    """``backend_url_allow`` and ``plugin_modules`` are process settings: an edit with the
    admin token, dry run or not, cannot point a backend at another URL or build a plugin
    from an unlisted module, and the policy in force stays."""
    path = write_policy(tmp_path / "p.yaml", policy(sims, 64))
    marker = tmp_path / "ran"
    settings = Settings(
        policy_path=path,
        port=0,
        watch_policy=False,
        admin_token="s3cret",
        backend_url_allow=["http://127.0.0.1:"],
    )
    with run_gateway(settings) as gw:
        admin = {"authorization": "Bearer s3cret"}
        first = httpx.get(gw.url + "/admin/policy", headers=admin).json()["digest"]
        outside = policy(sims, 20)
        outside["backends"][0]["url"] = "http://169.254.169.254/latest"  # type: ignore[index]
        evil = policy(sims, 20) | {
            "routing": {
                "scorers": [{"type": "subprocess:getoutput", "params": {"cmd": f"touch {marker}"}}]
            }
        }
        for doc, why in ((outside, "backend_url_allow"), (evil, "plugin_modules")):
            for query in ("", "?dry_run=1"):
                refused = httpx.put(
                    gw.url + "/admin/policy" + query, content=yaml.safe_dump(doc), headers=admin
                )
                assert refused.status_code == 400, refused.text
                assert why in refused.text
        assert not marker.exists()
        assert httpx.get(gw.url + "/admin/policy", headers=admin).json()["digest"] == first
        assert threshold(gw.url, headers=admin) == 64
