"""Real vLLM servers for the e2e tier: installed, built and started once per test session.

Every test under tests/e2e is marked ``e2e``. The servers come from ``deploy/vllm/cpu/``;
when vLLM cannot be installed or started the fixtures raise, so the tier errors instead of
silently skipping.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from deploy.vllm.cpu import launch
from deploy.vllm.cpu.server_args import SERVER_NAMES
from deploy.vllm.cpu.servers import VllmServer, running_servers

HERE = Path(__file__).resolve().parent
# Installing vLLM (about 90 s on a fresh machine) and booting four servers (about 100 s)
# land on the first test that asks for them; the default per-test timeout cannot cover that.
RIG_SETUP_TIMEOUT_S = 1200
RIG_FIXTURES = {"vllm_servers", "vllm_model_dirs", "vllm_model_dir"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # tryfirst: the marker must be on before ``-m`` deselects by it.
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.e2e)


def pytest_collection_finish(session: pytest.Session) -> None:
    # After all deselection: the long budget goes to the test that really starts the rig.
    for item in session.items:
        if RIG_FIXTURES & set(getattr(item, "fixturenames", ())):
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(RIG_SETUP_TIMEOUT_S))
            return


@pytest.fixture(scope="session")
def vllm_model_dirs() -> dict[str, Path]:
    """Install vLLM and build the models (both cached); name -> model directory."""
    return launch.prepare()


@pytest.fixture(scope="session")
def vllm_model_dir(vllm_model_dirs: dict[str, Path]) -> Path:
    """The served target model's directory (its tokenizer is the one every server uses)."""
    return vllm_model_dirs["tiny"]


@pytest.fixture(scope="session")
def vllm_servers(
    vllm_model_dirs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, VllmServer]]:
    """``plain``, ``ngram``, ``draft-good`` and ``draft-bad``, all serving model ``tiny``.

    Booted in parallel: on two cores that is ready in 75-100 s against about 155 s one
    after another, since start-up is mostly Python imports that overlap well.
    """
    log_dir = tmp_path_factory.mktemp("vllm-logs")
    with running_servers(
        SERVER_NAMES, model_dirs=vllm_model_dirs, log_dir=log_dir, parallel=True
    ) as servers:
        yield servers


@pytest.fixture(autouse=True)
def vllm_servers_alive(request: pytest.FixtureRequest) -> Iterator[None]:
    """Error out with the server's log tail when one of the session's servers has died.

    Checked before and after each test that uses the servers, so a crash shows up as
    itself instead of as puzzling failures in every later test that talks to it.
    """
    if "vllm_servers" not in request.fixturenames:
        yield
        return
    servers: dict[str, VllmServer] = request.getfixturevalue("vllm_servers")
    for server in servers.values():
        server.check_alive()
    yield
    for server in servers.values():
        server.check_alive()


class VllmMetrics:
    """Reads a Prometheus ``/metrics`` page (a vLLM server's, or a gateway's)."""

    def read(self, base_url: str) -> dict[str, float]:
        """Sample name -> value summed over all label sets (``position``, ``engine``...)."""
        text = httpx.get(f"{base_url}/metrics", timeout=10).text
        totals: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
        return totals

    def by_label(self, base_url: str, name: str, label: str) -> dict[str, float]:
        """One sample name's values keyed by one label, e.g. ``finished_reason``."""
        text = httpx.get(f"{base_url}/metrics", timeout=10).text
        values: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name:
                    key = sample.labels[label]
                    values[key] = values.get(key, 0.0) + sample.value
        return values

    def wait_until(
        self,
        base_url: str,
        done: Callable[[dict[str, float]], bool],
        timeout_s: float = 30.0,
    ) -> dict[str, float]:
        """Scrape until ``done(metrics)`` holds or time runs out; return the last scrape.

        vLLM folds a request into its counters just after the response ends, so a scrape
        taken right after a response may not show it yet.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            metrics = self.read(base_url)
            if done(metrics) or time.monotonic() > deadline:
                return metrics
            time.sleep(0.2)


@pytest.fixture(scope="session")
def vllm_metrics() -> VllmMetrics:
    return VllmMetrics()
