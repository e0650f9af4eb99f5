"""The shadow's numerics verdict on real vLLM: a float32 plain reference against an n-gram
engine in bfloat16 is ``numerics_differ`` within a bounded number of samples, and against
the same engine in float32 there is no group verdict over as many samples.

The bfloat16 server is not one of the session's four: this module starts it (another
~3 GB and ~80 s), once, for its own tests.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from deploy.vllm.cpu.servers import VllmServer, running_servers
from proxy.settings import Settings
from tests.gateway_rig import GatewayHandle, run_gateway, write_policy

# The bound: samples after which bfloat16 must be flagged, and float32 must still not be.
SAMPLES = 30
FUNCTIONS = [
    ("quicksort", "xs", "Sort a list of numbers with quicksort."),
    ("merge_sorted", "a, b", "Merge two sorted lists into one sorted list."),
    ("is_prime", "n", "Return True when n is a prime number."),
    ("fibonacci", "n", "Return the n-th Fibonacci number."),
    ("flatten", "nested", "Flatten a list of lists."),
    ("word_count", "text", "Count how often each word occurs in text."),
    ("binary_search", "xs, target", "Find target in the sorted list xs."),
    ("transpose", "matrix", "Transpose a matrix given as a list of rows."),
    ("gcd", "a, b", "Greatest common divisor of a and b."),
    ("reverse_words", "sentence", "Reverse the order of the words in a sentence."),
    ("chunks", "xs, size", "Split xs into lists of at most size items."),
    ("dedupe", "xs", "Remove duplicates from xs, keeping the first of each."),
    ("parse_csv_line", "line", "Split one CSV line into its fields."),
    ("moving_average", "xs, window", "Moving average of xs over window items."),
    ("to_snake_case", "name", "Convert a CamelCase name to snake_case."),
]
ROUTING = {
    "filters": [{"type": t} for t in ("model", "healthy", "quarantine", "capacity")],
    "scorers": [{"type": "break_even", "weight": 4, "params": {"plain_score": 0.0}}],
}


@pytest.fixture(scope="module")
def ngram_bf16(
    vllm_model_dirs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VllmServer]:
    logs = tmp_path_factory.mktemp("vllm-bf16-logs")
    with running_servers(["ngram-bf16"], model_dirs=vllm_model_dirs, log_dir=logs) as servers:
        yield servers["ngram-bf16"]


def requests() -> Iterator[tuple[str, dict[str, Any]]]:
    """Distinct greedy requests, alternating chat and completions, streamed and not."""
    for i in range(SAMPLES):
        name, args, doc = FUNCTIONS[i % len(FUNCTIONS)]
        common = {"model": "tiny", "max_tokens": 32, "temperature": 0, "ignore_eos": True}
        common["stream"] = i % 4 in (1, 3)
        if i % 2 == 0:
            prompt = f'def {name}({args}):\n    """{doc}"""\n'
            yield "/v1/completions", {**common, "prompt": prompt}
        else:
            ask = f"Write a Python function {name}({args}). {doc}"
            yield (
                "/v1/chat/completions",
                {
                    **common,
                    "messages": [{"role": "user", "content": ask}],
                },
            )


def shadow_policy(plain: VllmServer, primary: VllmServer, tmp_path: Path) -> Path:
    return write_policy(
        tmp_path / "policy.yaml",
        {
            "backends": [
                {"name": "plain", "url": plain.url, "model": "tiny", "pool": "plain"},
                {
                    "name": primary.name,
                    "url": primary.url,
                    "model": "tiny",
                    "pool": "ngram",
                    "speculation": {"method": "ngram", "k": 4},
                    "draft_version": primary.name,
                },
            ],
            "routing": ROUTING,
            "shadow": {
                "reference_pool": "plain",
                "rate": 1.0,
                "max_concurrency": 2,
                "max_share": 1.0,
                "store_text": True,
                # The policy's defaults otherwise: the prior floor (10%) until 50 control
                # samples, 99% confidence, at least 20 judged samples per group.
                "numerics": {"control_rate": 0.5, "evaluate_every_s": 0.5},
            },
        },
    )


def judged_after_each(gw: GatewayHandle, primary: str) -> list[dict[str, Any]]:
    """Send the requests one by one; the primary's group row after each is judged."""
    rows = []
    for n, (path, body) in enumerate(requests(), start=1):
        resp = httpx.post(gw.url + path, json=body, timeout=120)
        assert resp.status_code == 200, resp.text
        assert resp.headers["x-specroute-backend"] == primary
        deadline = time.monotonic() + 120
        while True:
            gw.call(lambda: gw.app.state.shadow.drain())
            summary = httpx.get(gw.url + "/admin/shadow", timeout=10).json()
            group = next((g for g in summary["groups"] if g["backend"] == primary), None)
            if (group and group["samples"] >= n) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert group is not None and group["samples"] == n
        rows.append({**group, "noise_floor": summary["noise_floors"]["tiny"]})
    return rows


def report(label: str, rows: list[dict[str, Any]]) -> None:
    last = rows[-1]
    first = next((i + 1 for i, r in enumerate(rows) if r["verdict"] == "numerics_differ"), None)
    print(
        f"\n{label}: outcomes {last['outcomes']}, exact_match_rate {last['exact_match_rate']}, "
        f"equivalence_rate {last['equivalence_rate']}, verdict {last['verdict']} "
        f"(first numerics_differ after {first} samples); {last['numerics']['reason']}; "
        f"gap p50 {last['severity']['gap']['p50']}, prefix p50 "
        f"{last['severity']['prefix_tokens']['p50']}; floor {last['noise_floor']}"
    )


def test_bfloat16_primary_against_float32_reference_differs(
    vllm_servers: dict[str, VllmServer], ngram_bf16: VllmServer, tmp_path: Path
) -> None:
    path = shadow_policy(vllm_servers["plain"], ngram_bf16, tmp_path)
    with run_gateway(Settings(policy_path=path, port=0, first_byte_timeout_s=120)) as gw:
        rows = judged_after_each(gw, "ngram-bf16")
        report("plain float32 vs ngram bfloat16", rows)
        assert rows[-1]["verdict"] == "numerics_differ", rows[-1]["numerics"]
        mismatch = httpx.get(gw.url + "/admin/shadow/review?limit=1", timeout=10).json()
        case = httpx.get(
            gw.url + f"/admin/shadow/review/{mismatch['mismatches'][0]['id']}", timeout=10
        ).json()
        assert case["top_logprobs"] and case["aligned"]["reference"]


def test_float32_primary_against_float32_reference_has_no_verdict(
    vllm_servers: dict[str, VllmServer], tmp_path: Path
) -> None:
    path = shadow_policy(vllm_servers["plain"], vllm_servers["ngram"], tmp_path)
    with run_gateway(Settings(policy_path=path, port=0, first_byte_timeout_s=120)) as gw:
        rows = judged_after_each(gw, "ngram")
        report("plain float32 vs ngram float32", rows)
        assert all(r["verdict"] != "numerics_differ" for r in rows)
        assert rows[-1]["verdict"] == "within_floor"
        assert rows[-1]["samples"] == SAMPLES
