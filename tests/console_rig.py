"""A simulated fleet with a canary and shadow verification, and steady load on a gateway:
what the console and the Prometheus tests look at."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from openai import OpenAI

from proxy.sim.config import SimConfig
from proxy.sim.server import SimServer, run_sim_in_thread
from tests.gateway_rig import sim_backend

MODEL = "sim-llama-8b"
PROMPTS = {
    "chat": "Tell me about a quiet morning by the sea, request {i}.",
    "code": "Fix this function:\n```python\ndef add(a, b):\n    return a - b  # {i}\n```",
    "rag": (
        "Use the following context to answer.\n<context>\nThe Harbour Bridge opened in 1932 "
        "and carries eight lanes of traffic. It was repainted in 2019. The repainting took "
        "eleven months.\n</context>\nQuestion {i}: when did the bridge open?"
    ),
}


@contextlib.contextmanager
def sim_fleet() -> Iterator[dict[str, SimServer]]:
    with (
        run_sim_in_thread(SimConfig(model=MODEL)) as plain,
        run_sim_in_thread(SimConfig(model=MODEL, speculation="ngram", k=4, seed=1)) as ngram,
        run_sim_in_thread(SimConfig(model=MODEL, speculation="eagle3", k=3, seed=2)) as eagle,
        run_sim_in_thread(SimConfig(model=MODEL, speculation="eagle3", k=3, seed=3)) as cand,
    ):
        yield {"plain-0": plain, "ngram-0": ngram, "eagle3-0": eagle, "eagle3-v2": cand}


def fleet_policy(sims: dict[str, SimServer], *, canary: bool = True) -> dict[str, Any]:
    policy: dict[str, Any] = {
        "version": "console-test",
        "backends": [
            sim_backend("plain-0", sims["plain-0"].url, "plain"),
            sim_backend("ngram-0", sims["ngram-0"].url, "ngram", "ngram", 4),
            sim_backend(
                "eagle3-0", sims["eagle3-0"].url, "eagle3", "eagle3", 3, draft_version="v1"
            ),
            sim_backend(
                "eagle3-v2", sims["eagle3-v2"].url, "eagle3", "eagle3", 3, draft_version="v2"
            ),
        ],
        "pools": {
            "ngram": {"break_even": {"mode": "static", "concurrency": 48}},
            "eagle3": {"break_even": {"mode": "learned", "concurrency": 64, "min_samples": 5}},
        },
        "shadow": {
            "reference_pool": "plain",
            "rate": 1.0,
            "max_share": 1.0,
            "store_text": True,
            "quarantine": {"enabled": False},
        },
    }
    if canary:
        policy["canary"] = {
            "name": "eagle3-v2",
            "candidates": ["eagle3-v2"],
            "baseline": ["eagle3-0"],
            "ramp": [0.25, 0.5, 1.0],
            # The controller must not decide on its own during the test: operators do.
            "min_samples": 100_000,
            "criteria": {"collapse_acceptance": 0.0},
        }
    return policy


class Load:
    """Threads sending chat requests of every prompt class through the gateway until stopped."""

    def __init__(self, base_url: str, threads: int = 4, max_tokens: int = 12) -> None:
        self.client = OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0)
        self.max_tokens = max_tokens
        self.sent = 0
        self.failed = 0
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(n,), daemon=True) for n in range(threads)
        ]

    def _one(self, text: str, stream: bool, session: str) -> None:
        messages = [{"role": "user", "content": text}]
        common: dict[str, Any] = {
            "model": MODEL,
            "max_tokens": self.max_tokens,
            "temperature": 0,
            "extra_headers": {"x-specroute-session": session},
        }
        if stream:
            for _ in self.client.chat.completions.create(
                messages=messages,  # type: ignore[arg-type]
                stream=True,
                **common,
            ):
                pass
        else:
            self.client.chat.completions.create(messages=messages, **common)  # type: ignore[arg-type]

    def _run(self, n: int) -> None:
        classes = list(PROMPTS)
        i = 0
        while not self._stop.is_set():
            label = classes[(i + n) % len(classes)]
            try:
                self._one(PROMPTS[label].format(i=i), i % 2 == 0, f"user-{n}-{i}")
                self.sent += 1
            except Exception:
                self.failed += 1
            i += 1

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)
