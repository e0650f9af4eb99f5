"""The routing policies the routing-quality benchmark compares, on one simulated fleet.

Every policy is a policy document for the same gateway code; they differ only in their
plugins and, for all-speculative / all-plain, in which backends they may use:

- ``round-robin``: rotate over every backend (simple gateways);
- ``least-loaded``: the ``load`` scorer alone (in-flight, queue, KV pressure), what the
  public LLM routers do; class- and speculation-blind;
- ``all-speculative``: least-loaded over the speculative backends only ("turn speculation
  on everywhere");
- ``all-plain``: least-loaded over the plain backends only ("never speculate");
- ``specroute-static``: the default specroute profile (acceptance floor; break-even,
  acceptance and load scorers) with fixed per-pool break-even points;
- ``specroute-learned``: the same, the break-even points learned online from measured TPOT;
- ``specroute-balanced`` (an experiment with the same plugins, not the shipped default):
  learned break-even used only as a cap (``plain_score: 1.0``: below it speculative and
  plain backends score alike), the acceptance scorer as the speculative bias, and the
  load scorer at weight 4, so plain capacity is used before speculative backends queue.

Both specroute variants start from the break-even values shipped in
``policies/default.yaml`` (n-gram 48, EAGLE-3 64 requests per backend).
"""

from __future__ import annotations

from typing import Any

from loadtests.simfleet import SimFleet, SimSpec

FLEET: tuple[SimSpec, ...] = (
    SimSpec("plain-0", "plain", seed=11),
    SimSpec("plain-1", "plain", seed=12),
    SimSpec("ngram-0", "ngram", "ngram", 4, seed=13),
    SimSpec("eagle-0", "eagle3", "eagle3", 3, seed=14, draft_version="eagle3-v1"),
)
SPECULATIVE = frozenset(s.name for s in FLEET if s.method != "none")
BREAK_EVEN = {"ngram": 48.0, "eagle3": 64.0}
POLICIES = (
    "round-robin",
    "least-loaded",
    "all-speculative",
    "all-plain",
    "specroute-static",
    "specroute-learned",
    "specroute-balanced",
)
# The per-phase envelope: in each phase, the best of the policies that do not learn.
STATIC_POLICIES = POLICIES[:5]

_BASIC_FILTERS = [{"type": "model"}, {"type": "healthy"}, {"type": "capacity"}]


def _least_loaded() -> dict[str, Any]:
    return {
        "filters": _BASIC_FILTERS,
        "scorers": [{"type": "load", "weight": 1.0}],
        "picker": {"type": "max_score"},
    }


def _specroute(mode: str, break_even: dict[str, float]) -> dict[str, Any]:
    return {
        "pools": {
            pool: {"break_even": {"mode": mode, "concurrency": value}}
            for pool, value in break_even.items()
        }
    }


def build_policy(
    name: str, fleet: SimFleet, break_even: dict[str, float] | None = None
) -> dict[str, Any]:
    """The policy document for ``name`` over ``fleet``'s simulators."""
    break_even = break_even or BREAK_EVEN
    everything = fleet.backends()
    spec_only = [b for b in everything if b["name"] in SPECULATIVE]
    plain_only = [b for b in everything if b["name"] not in SPECULATIVE]
    policy: dict[str, Any] = {"version": name}
    if name == "round-robin":
        policy |= {
            "backends": everything,
            "routing": {
                "filters": _BASIC_FILTERS,
                "scorers": [],
                "picker": {"type": "round_robin"},
            },
        }
    elif name == "least-loaded":
        policy |= {"backends": everything, "routing": _least_loaded()}
    elif name == "all-speculative":
        policy |= {"backends": spec_only, "routing": _least_loaded()}
    elif name == "all-plain":
        policy |= {"backends": plain_only, "routing": _least_loaded()}
    elif name == "specroute-static":
        policy |= {"backends": everything, **_specroute("static", break_even)}
    elif name == "specroute-learned":
        policy |= {"backends": everything, **_specroute("learned", break_even)}
    elif name == "specroute-balanced":
        scorers = [
            {"type": "break_even", "weight": 4.0, "params": {"plain_score": 1.0}},
            {"type": "acceptance", "weight": 1.0},
            {"type": "load", "weight": 4.0},
        ]
        policy |= {
            "backends": everything,
            **_specroute("learned", break_even),
            "routing": {"scorers": scorers},
        }
    else:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")
    return policy
