"""The Grafana dashboard and the alert rules against a real Prometheus (Debian's package).

Prometheus scrapes a gateway over a loaded simulated fleet once a second: every dashboard
query must return series, so a misspelt metric or label fails here. A few series exist only
after an event (a gateway error, a retry, a dropped shadow sample, a policy reload, a learned
break-even): for those the metric must at least be declared in the gateway's /metrics (its
HELP line), which is where a misspelling would show. The alert rules have promtool unit
tests; and an acceptance collapse injected in a simulator fires its alert in Prometheus.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from proxy.settings import Settings
from tests.console_rig import Load, fleet_policy, sim_fleet
from tests.gateway_rig import free_port, run_gateway, write_policy

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "specroute-alerts.yaml"
RULE_TESTS = sorted((ROOT / "deploy" / "prometheus" / "tests").glob("*.yaml"))
DASHBOARDS = sorted((ROOT / "deploy" / "grafana").glob("*.json"))
# Series that appear only once something happens (see the module docstring).
EVENT_ONLY = {
    "specroute_errors_total",
    "specroute_retries_total",
    "specroute_shed_total",
    "specroute_shadow_dropped_total",
    "specroute_policy_reloads_total",
    "specroute_break_even_learned",
}
METRIC = re.compile(r"\b(?:specroute_[a-z_]+|vllm:[a-z_]+)")


def binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is missing: scripts/test.sh installs Debian's prometheus package")
    return path


def dashboard_queries() -> list[tuple[str, str]]:
    out = []
    for path in DASHBOARDS:
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel.get("targets", []):
                out.append((f"{path.name}: {panel['title']}", target["expr"]))
    return out


def test_alert_rule_unit_tests_pass() -> None:
    assert RULE_TESTS
    check = subprocess.run(
        [binary("promtool"), "check", "rules", str(RULES)], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    result = subprocess.run(
        [binary("promtool"), "test", "rules", *map(str, RULE_TESTS)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # Every alert in the rule file has at least one test that expects it to fire.
    tested = set(re.findall(r"alertname: (\w+)", "".join(p.read_text() for p in RULE_TESTS)))
    rules = yaml.safe_load(RULES.read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    assert alerts <= tested, alerts - tested


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, expr: str) -> list[dict[str, Any]]:
        resp = httpx.get(self.url + "/api/v1/query", params={"query": expr}, timeout=10)
        body = resp.json()
        assert body["status"] == "success", (expr, body)
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def alerts(self) -> list[dict[str, Any]]:
        alerts: list[dict[str, Any]] = httpx.get(self.url + "/api/v1/alerts").json()["data"][
            "alerts"
        ]
        return alerts


def prometheus_config(tmp: Path, target: str) -> Path:
    """Our own config: one scrape job (the gateway), a 1 s rhythm, and the alert rules with
    every ``for:`` cut to 1 s (what is tested here is that they match live series)."""
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule["for"] = "1s"
    (tmp / "rules.yaml").write_text(yaml.safe_dump(rules))
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(tmp / "rules.yaml")],
        "scrape_configs": [{"job_name": "specroute", "static_configs": [{"targets": [target]}]}],
    }
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def prometheus_for(tmp_path: Path) -> Iterator[Any]:
    processes: list[subprocess.Popen[bytes]] = []

    def start(target: str) -> Prometheus:
        port = free_port()
        process = subprocess.Popen(
            [
                binary("prometheus"),
                f"--config.file={prometheus_config(tmp_path, target)}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / "prometheus.log").open("wb"),
        )
        processes.append(process)
        prom = Prometheus(f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert process.poll() is None, (tmp_path / "prometheus.log").read_text()
            try:
                if httpx.get(prom.url + "/-/ready", timeout=1).status_code == 200:
                    return prom
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError("prometheus did not become ready")

    yield start
    for process in processes:
        process.terminate()
        process.wait(timeout=10)


def wait_for(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.25)


def firing(prom: Prometheus, name: str, **labels: str) -> bool:
    return any(
        a["labels"]["alertname"] == name
        and a["state"] == "firing"
        and all(a["labels"].get(k) == v for k, v in labels.items())
        for a in prom.alerts()
    )


def test_dashboard_queries_return_series_and_a_collapse_fires(
    tmp_path: Path, prometheus_for: Any
) -> None:
    queries = dashboard_queries()
    assert len(queries) >= 20
    with sim_fleet() as sims:
        # Real drift on one head, so the drift panels have diverged verdicts to show.
        httpx.post(sims["eagle3-0"].url + "/admin/faults", json={"drift_from_token": 4})
        path = write_policy(tmp_path / "policy.yaml", fleet_policy(sims))
        with (
            run_gateway(Settings(policy_path=path, port=0, watch_policy=False)) as gw,
            Load(gw.url),
        ):
            prom = prometheus_for(gw.url.removeprefix("http://"))
            exposed = httpx.get(gw.url + "/metrics").text
            # rate() needs two samples, the [5m] histograms a few: wait for the slowest.
            wait_for(
                lambda: prom.query(queries[-1][1]) and prom.query("sum(specroute_shadow_total)"),
                20,
                "first scrapes",
            )
            wait_for(
                lambda: prom.query(
                    "histogram_quantile(0.99, sum by (pool, le) "
                    "(rate(specroute_tpot_seconds_bucket[5m])))"
                ),
                20,
                "histogram rates",
            )
            empty = []
            for title, expr in queries:
                if prom.query(expr):
                    continue
                names = set(METRIC.findall(expr))
                assert names, (title, expr)
                if names <= EVENT_ONLY and all(f"# HELP {n}" in exposed for n in names):
                    print(f"\nevent-only, declared in /metrics: {title}: {expr}")
                    continue
                empty.append((title, expr))
            assert not empty, empty

            # The collapse: n-gram drafts stop being accepted. Code prompts go to n-gram
            # (it pays there), so that class's window falls under the floor first.
            assert not firing(
                prom, "SpecrouteAcceptanceBelowFloor", backend="ngram-0", **{"class": "code"}
            )
            httpx.post(
                sims["ngram-0"].url + "/admin/faults", json={"acceptance": 0.0}
            ).raise_for_status()
            wait_for(
                lambda: firing(
                    prom, "SpecrouteAcceptanceBelowFloor", backend="ngram-0", **{"class": "code"}
                ),
                30,
                "SpecrouteAcceptanceBelowFloor for ngram-0/code",
            )
