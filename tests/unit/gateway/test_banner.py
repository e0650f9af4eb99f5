"""The start-up banner names the fleet and the places a person needs first."""

from __future__ import annotations

import shlex

import orjson

from proxy.gateway.banner import banner
from proxy.policy import parse_policy
from proxy.settings import Settings

POLICY = """
backends:
  - {name: plain-0, url: "http://10.0.0.1:8000", model: llama-8b, pool: plain}
  - {name: eagle-0, url: "http://10.0.0.2:8000", model: llama-8b, pool: eagle,
     speculation: {method: eagle3, k: 3}}
pools:
  eagle: {break_even: {mode: learned, concurrency: 40}}
shadow: {reference_pool: plain, rate: 0.1}
"""


def test_banner_lists_fleet_urls_and_a_first_request() -> None:
    text = banner(Settings(port=9000), parse_policy(POLICY, "p.yaml"), "p.yaml")
    assert "http://127.0.0.1:9000  (p.yaml)" in text
    for line in ("plain-0", "eagle-0", "eagle3 k=3", "http://10.0.0.2:8000", "eagle 40 (learned)"):
        assert line in text
    assert "console     http://127.0.0.1:9000/ui" in text
    assert "metrics     http://127.0.0.1:9000/metrics" in text
    assert "loopback clients only" in text
    assert "reference pool plain, 10% of greedy requests" in text
    # The curl line is a runnable command whose body asks for a served model.
    body = shlex.split(text.split("-d ", 1)[1].splitlines()[0])[0]
    assert orjson.loads(body)["model"] == "llama-8b"


def test_banner_with_a_token_points_at_the_sign_in() -> None:
    text = banner(Settings(admin_token="t"), parse_policy(POLICY, "p.yaml"), "p.yaml")
    assert "/ui/login" in text and "loopback" not in text
