"""The embedded default fleet: simulated vLLM backends started in-process.

``specroute serve`` with no policy runs this, so a newcomer sees routing, metrics and
shadow results with one command: a plain engine (the shadow reference), an n-gram engine
(prompt lookup: pays on code and RAG) and an EAGLE-3-style engine (pays on chat too), all
serving one model.

Composed where the command line is: ``proxy/cli.py`` hands ``start_embedded_fleet`` to
``create_app`` as its ``local_fleet``, so the gateway imports nothing of the simulator.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal

import orjson

from proxy.sim.config import SimConfig
from proxy.sim.server import SimServer

MODEL = "sim-llama-8b"
Method = Literal["none", "ngram", "draft_model", "eagle3"]
_FLEET: tuple[tuple[str, str, Method, int], ...] = (
    ("plain-0", "plain", "none", 0),
    ("ngram-0", "ngram", "ngram", 4),
    ("eagle3-0", "eagle3", "eagle3", 3),
)


# Whether uvicorn lines come from an embedded simulator: set while the simulators' server
# tasks are created, so those tasks (and only they) carry it in their context. The
# simulators share the "uvicorn.error" logger with the gateway's own server, so a logger
# level cannot tell them apart; the task context can.
_IN_SIMULATOR: ContextVar[bool] = ContextVar("specroute_in_embedded_simulator", default=False)


class _QuietSimulators(logging.Filter):
    """Drops uvicorn's start/stop lines of the embedded simulators (one set per simulator)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _IN_SIMULATOR.get()


def _quiet_uvicorn() -> None:
    for name in ("uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _QuietSimulators) for f in logger.filters):
            logger.addFilter(_QuietSimulators())


@dataclass(slots=True)
class EmbeddedFleet:
    servers: list[SimServer]
    policy_text: str

    async def stop(self) -> None:
        for server in self.servers:
            await server.stop()


async def start_embedded_fleet(host: str = "127.0.0.1", *, quiet: bool = True) -> EmbeddedFleet:
    """Start the simulators; ``quiet`` keeps their uvicorn lines out of the gateway's log."""
    servers: list[SimServer] = []
    backends = []
    if quiet:
        _quiet_uvicorn()
    marked = _IN_SIMULATOR.set(quiet)
    try:
        for name, pool, method, k in _FLEET:
            config = SimConfig(model=MODEL, speculation=method, k=max(k, 1), seed=len(servers))
            server = SimServer(config, host=host, port=0)
            await server.start()
            servers.append(server)
            backends.append(
                {
                    "name": name,
                    "url": server.url,
                    "model": MODEL,
                    "pool": pool,
                    "speculation": {"method": method, "k": k},
                    "draft_version": "sim-v1" if k else "",
                }
            )
    except BaseException:
        for server in servers:
            await server.stop()
        raise
    finally:
        _IN_SIMULATOR.reset(marked)
    policy = {
        "version": "embedded-default",
        "backends": backends,
        "pools": {
            "ngram": {"break_even": {"mode": "learned", "concurrency": 48}},
            "eagle3": {"break_even": {"mode": "learned", "concurrency": 64}},
        },
        "shadow": {"reference_pool": "plain", "rate": 0.05},
        # Routed as policies/default.yaml ships (a test holds the two alike).
        "slo": {"default": {"ttft_ms": 500, "tpot_ms": 25}},
        "latency": {"profile": "default"},
        "overload": {"shed_above": 1.0},
        "routing": {
            "filters": [
                {"type": kind}
                for kind in (
                    "model",
                    "healthy",
                    "quarantine",
                    "canary",
                    "capacity",
                    "acceptance_floor",
                )
            ],
            "scorers": [
                {
                    "type": "latency",
                    "weight": 1,
                    "params": {
                        "spread": 4,
                        "latency_weight": 0.25,
                        "neighbour_weight": 0.25,
                        "saturated_below": 0.5,
                        "overflow": 0.5,
                        "wait_weight": 8,
                        "tail_weight": 64,
                        "tail_from": 0.1,
                        "prefix_cache": True,
                    },
                },
                {"type": "prefix_affinity", "weight": 1.0},
            ],
            "picker": {"type": "max_score"},
        },
    }
    # JSON is valid YAML: the policy text shown by /admin/policy is exactly what runs.
    return EmbeddedFleet(servers, orjson.dumps(policy, option=orjson.OPT_INDENT_2).decode())
