"""The routing policies the routing-quality benchmark compares, on one simulated fleet
(:data:`FLEETS`: the standard vLLM fleet, or a mixed fleet of three engines).

Every policy is a policy document for the same gateway code; they differ only in their
plugins and, for all-speculative / all-plain, in which backends they may use:

- ``round-robin``: rotate over every backend (simple gateways);
- ``power-of-two``: the ``load`` scorer counting requests, two backends drawn at random
  and the less loaded taken (power of two choices, what vllm-router ships);
- ``least-prompt-tokens``: least outstanding prompt tokens (sent, no first byte back
  yet: ``load`` with ``prefill_tokens_full`` 1024, so pending prompt tokens outweigh the
  in-flight count, which only breaks ties);
- ``least-loaded``: the ``load`` scorer alone counting requests (in-flight, queue, KV
  pressure; ``prefill_tokens_full: 0``, prompt sizes not counted), what the public LLM
  routers do; class- and speculation-blind;
- ``all-speculative``: least-loaded over the speculative backends only ("turn speculation
  on everywhere");
- ``all-plain``: least-loaded over the plain backends only ("never speculate");
- ``specroute-static``: the shipped default profile (``proxy/policy/schema.py``,
  ``policies/default.yaml``: acceptance floor; break-even, acceptance and load scorers
  with their shipped weights and params) with fixed per-pool break-even points;
- ``specroute-learned``: the same, the break-even points learned online from measured TPOT
  (the default until issue 15; ``policies/example-break-even.yaml``);
- ``specroute-default``: what ships: the ``routing``, ``pools``, ``acceptance`` and
  ``overload`` sections of ``policies/default.yaml`` read as they are, over the
  benchmark's backends (its ``slo`` and ``latency`` sections are the benchmark's facts,
  below); today the latency scorer behind the shipped filters, refusing in overload the
  requests predicted past their objective;
- ``specroute-latency``: the ``latency`` scorer alone at its built-in params (predicted
  TTFT/TPOT against the SLO, proxy/routing/scheduler/latency_scorer.py) behind the default
  filters;
- ``specroute-balanced`` (an experiment, kept as first measured): learned break-even used
  only as a cap (``plain_score: 1.0``: below it speculative and plain backends score
  alike), the acceptance scorer as the speculative bias, and the load scorer at weight 4
  counting requests only (``prefill_tokens_full: 0``), so plain capacity is used before
  speculative backends queue.

Experiments, run only when named with ``--policies`` (not part of the default run):

- ``specroute-latency-solo``: the latency scorer blind to what a request's prefill costs
  the requests already on a backend (``neighbour_weight: 0``);
- ``specroute-latency-n1``, ``specroute-latency-n05``: that cost weighed at 1 (the
  built-in weight until issue 15's runs) and at 0.5 (the built-in weight is 0.25);
- ``least-loaded-prefill``: least-loaded whose load scorer also counts the prompt tokens
  waiting for prefill (``prefill_tokens_full`` 16384): the class-blind baseline with the
  same load signal as specroute, to tell what the speculation routing itself adds;
- ``specroute-prefill``: ``specroute-balanced`` with the load scorer also counting pending
  prefill (``prefill_tokens_full`` 16384), so a burst of long RAG/code prompts spreads
  over the fleet instead of queueing for prefill on the n-gram engine;
- ``specroute-prefill-8k``: the same with ``prefill_tokens_full`` 8192 (pending prefill
  weighs twice as much);
- ``specroute-prefill-load6``: ``specroute-prefill`` with the load scorer at weight 6
  (load outweighs the acceptance bias sooner);
- ``specroute-prefill-be2``: ``specroute-prefill`` with the break-even scorer at weight 2
  (past break-even a speculative backend loses half as much: a softer cap);
- ``specroute-affinity``: the shipped profile's scorers (``specroute-prefill``'s weights)
  plus the ``prefix_affinity`` scorer at weight 2 (a follow-up or a second question on a
  document goes where its prefix is likely cached, while the others rate backends alike).

- ``specroute-no-shed``: what ships without refusing requests in overload
  (``overload.shed_above`` 0: every request goes to an engine however late; the latency
  scorer's ``overflow`` then sends the requests no engine can serve in time to the
  longest queue);
- ``specroute-no-shed-no-overflow``: the same with ``overflow`` at 0 (such requests go to
  the shortest queue, as every saturated request did before);
- ``specroute-shed-only``: what ships refusing at once what it would queue
  (``admission.enabled`` false: the overload guard alone, as before the admission queue);
- ``specroute-shed-2x``: what ships refusing only requests predicted past twice their
  objective (``shed_above`` 2; 1 ships);
- ``specroute-cap24``: what ships without shedding, every backend's ``max_concurrency``
  fixed at 24 instead (past it the capacity filter leaves no backend: a 503): the fixed
  cap a deployment would have to find for its own engines, to set beside the shedding
  the latency model decides;
- ``specroute-no-wait``: what ships with the latency scorer's ``wait_weight`` at 0 (a wait
  for the first token counts once in the expected end-to-end time; 8 ships);
- ``specroute-wait32``, ``specroute-wait64``: the same weight at 32 and 64, where the
  light-load TTFT tail against goodput was measured (loadtests/README.md, issue 15: more
  weight moves chat onto the plain engines and costs goodput without lowering the tail);
- ``specroute-no-tail``: what ships with the latency scorer's ``tail_weight`` at 0 (a
  first token bound for the tail weighs no more than any other wait; 64 ships);
- ``specroute-no-affinity``: what ships without its ``prefix_affinity`` scorer (the latency
  scorer alone, as shipped before issue 40's "Sessions stay on their engine");
  ``specroute-sticky25``, ``-sticky50``, ``-sticky75``, ``-sticky200``: that scorer at
  0.25, 0.5 (shipped until 2026-12-07 evening), 0.75 and 2 (1 ships);
- ``specroute-no-shadow``: what ships without its ``shadow`` section (what verification on
  by default costs the engines);
- ``specroute-default-priority``: what ships with the open gateway's requests allowed to
  ask for their priority (``admission.default_tenant.allow_header``: the
  ``x-specroute-priority`` header), for traces that mark requests critical or sheddable;
- ``specroute-no-prefix``: what ships with the latency scorer blind to the prefix index
  (``prefix_cache`` false, as shipped before issue 40): what prefix awareness by default
  changes on traces that share little;
- ``specroute-queue-wait4``, ``-wait8``, ``-wait16``: what ships with standard requests
  waiting in the queue up to 4, 8 or 16 times their TTFT objective before a refusal,
  requests allowed to ask for their priority.

Every experiment states all of its weights and params, so it stays the same experiment
when the shipped defaults change. All specroute variants start from the break-even values
shipped in ``policies/default.yaml`` (n-gram 48, EAGLE-3 64 requests per backend).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from loadtests.tools.simfleet import SimSpec

# The shipped policy, whose routing, pools, acceptance and overload sections
# ``specroute-default`` is.
SHIPPED_POLICY = Path(__file__).resolve().parents[2] / "policies" / "default.yaml"
SHIPPED_SECTIONS = ("routing", "pools", "acceptance", "overload", "admission", "shadow")

FLEET: tuple[SimSpec, ...] = (
    SimSpec("plain-0", "plain", seed=11),
    SimSpec("plain-1", "plain", seed=12),
    SimSpec("ngram-0", "ngram", "ngram", 4, seed=13),
    SimSpec("eagle-0", "eagle3", "eagle3", 3, seed=14, draft_version="eagle3-v1"),
)
# Three engines routed as one fleet: a vLLM plain engine (the reference), an SGLang EAGLE-3
# engine with SGLang's own default tree for a Llama target (5 deep: k=5) and a TensorRT-LLM
# n-gram engine drafting 3 tokens (the draft length of its own automatic choice above batch
# 4); each simulator answers as its engine and runs that engine's profile
# (proxy/stepcost/engines.py).
MIXED_FLEET: tuple[SimSpec, ...] = (
    SimSpec("vllm-plain-0", "plain", seed=11),
    SimSpec(
        "sglang-eagle3-0",
        "eagle3",
        "eagle3",
        5,
        seed=14,
        draft_version="eagle3-v1",
        engine="sglang",
    ),
    SimSpec("trtllm-ngram-0", "ngram", "ngram", 3, seed=13, engine="trtllm"),
)
# ``--fleet`` of the routing benchmark.
FLEETS: dict[str, tuple[SimSpec, ...]] = {"standard": FLEET, "mixed": MIXED_FLEET}


def speculative_names(specs: Sequence[SimSpec]) -> frozenset[str]:
    return frozenset(s.name for s in specs if s.method != "none")


SPECULATIVE = speculative_names(FLEET)
BREAK_EVEN = {"ngram": 48.0, "eagle3": 64.0}
# The per-phase envelope: in each phase, the best of the policies that do not learn.
STATIC_POLICIES = (
    "round-robin",
    "least-loaded",
    "power-of-two",
    "least-prompt-tokens",
    "all-speculative",
    "all-plain",
    "specroute-static",
)
# What a full run compares (in this order), and all a user is offered to compare their own
# traffic under (``specroute bench replay --policies``): the static baselines and the
# specroute policies that ship (policies/default.yaml; the learned break-even of
# policies/example-break-even.yaml). The experiments below stay reachable by name, from
# ``bench routing-quality --policies`` and from code, for the measurements that need them.
DEFAULT_POLICIES = (*STATIC_POLICIES, "specroute-learned", "specroute-default")
# Experiments: run only when named.
EXPERIMENTS = (
    "specroute-no-shed",
    "specroute-no-shed-no-overflow",
    "specroute-shed-only",
    "specroute-shed-2x",
    "specroute-cap24",
    "specroute-no-wait",
    "specroute-wait32",
    "specroute-wait64",
    "specroute-no-tail",
    "specroute-no-shadow",
    "specroute-default-priority",
    "specroute-no-prefix",
    "specroute-no-affinity",
    "specroute-sticky25",
    "specroute-sticky50",
    "specroute-sticky75",
    "specroute-sticky200",
    "specroute-queue-wait4",
    "specroute-queue-wait8",
    "specroute-queue-wait16",
    "specroute-latency-solo",
    "specroute-latency-sat",
    "specroute-latency-n1",
    "specroute-latency-n05",
    "specroute-latency-prefix",
    "specroute-balanced",
    "least-loaded-prefill",
    "specroute-prefill",
    "specroute-prefill-8k",
    "specroute-prefill-load6",
    "specroute-prefill-be2",
    "specroute-affinity",
)
# ``specroute-default`` is policies/default.yaml as shipped (today the latency scorer at
# its built-in params, spelled out); ``specroute-latency``, the scorer from the code
# alone, runs by name.
POLICIES = (*DEFAULT_POLICIES, "specroute-latency", *EXPERIMENTS)

_BASIC_FILTERS = [{"type": "model"}, {"type": "healthy"}, {"type": "capacity"}]


def _least_loaded(prefill_tokens_full: int = 0, picker: str = "max_score") -> dict[str, Any]:
    load = {"type": "load", "weight": 1.0, "params": {"prefill_tokens_full": prefill_tokens_full}}
    return {"filters": _BASIC_FILTERS, "scorers": [load], "picker": {"type": picker}}


def _scorers(
    break_even_weight: float, plain_score: float, load_weight: float, prefill_tokens_full: int
) -> dict[str, Any]:
    """A specroute profile's scorers with every weight and param stated."""
    break_even = {"plain_score": plain_score}
    return {
        "scorers": [
            {"type": "break_even", "weight": break_even_weight, "params": break_even},
            {"type": "acceptance", "weight": 1.0},
            {
                "type": "load",
                "weight": load_weight,
                "params": {"prefill_tokens_full": prefill_tokens_full},
            },
        ]
    }


def _specroute(mode: str, break_even: dict[str, float]) -> dict[str, Any]:
    return {
        "pools": {
            pool: {"break_even": {"mode": mode, "concurrency": value}}
            for pool, value in break_even.items()
        }
    }


# (break-even weight, plain_score, load weight, prefill_tokens_full) of the specroute
# experiments (the acceptance scorer has weight 1 in all).
_EXPERIMENT_SCORERS: dict[str, tuple[float, float, float, int]] = {
    "specroute-balanced": (4.0, 1.0, 4.0, 0),
    "specroute-prefill": (4.0, 1.0, 4.0, 16384),
    "specroute-prefill-8k": (4.0, 1.0, 4.0, 8192),
    "specroute-prefill-load6": (4.0, 1.0, 6.0, 16384),
    "specroute-prefill-be2": (2.0, 1.0, 4.0, 16384),
}


# The latency scorer's experiments: params over its defaults.
_LATENCY_EXPERIMENTS: dict[str, dict[str, float]] = {
    "specroute-latency-solo": {"neighbour_weight": 0.0},
    "specroute-latency-sat": {"saturated_below": 0.5},
    "specroute-latency-n1": {"neighbour_weight": 1.0},
    "specroute-latency-n05": {"neighbour_weight": 0.5},
    "specroute-latency-prefix": {"prefix_cache": True},
}


@dataclass(frozen=True, slots=True)
class _Shipped:
    """What ships (``specroute-default``), or a variant of it: another overload section
    (None: the shipped one), every backend's ``max_concurrency`` fixed (None: the fleet's
    own), latency-scorer params over the shipped ones."""

    overload: dict[str, float] | None = None
    cap: int | None = None
    latency: dict[str, float | bool] = field(default_factory=dict)
    # False: without the shipped shadow section (what verification costs).
    shadow: bool = True
    # False: the admission queue off (refused at once, as the overload guard alone did).
    queue: bool = True
    # True: requests may ask for their priority by header (the default tenant's allow_header).
    priority_header: bool = False
    # Over the shipped admission section (``priorities`` merged per priority).
    admission: dict[str, Any] = field(default_factory=dict)
    # The ``prefix_affinity`` scorer's weight instead of the shipped one (0: without it).
    affinity: float | None = None


_SHIPPED_VARIANTS: dict[str, _Shipped] = {
    "specroute-default": _Shipped(),
    "specroute-no-shed": _Shipped(overload={"shed_above": 0.0}),
    "specroute-no-shed-no-overflow": _Shipped(
        overload={"shed_above": 0.0}, latency={"overflow": 0.0}
    ),
    "specroute-shed-only": _Shipped(queue=False),
    "specroute-shed-2x": _Shipped(overload={"shed_above": 2.0}),
    "specroute-cap24": _Shipped(overload={"shed_above": 0.0}, cap=24),
    "specroute-no-wait": _Shipped(latency={"wait_weight": 0.0}),
    "specroute-wait32": _Shipped(latency={"wait_weight": 32.0}),
    "specroute-wait64": _Shipped(latency={"wait_weight": 64.0}),
    "specroute-no-tail": _Shipped(latency={"tail_weight": 0.0}),
    "specroute-no-shadow": _Shipped(shadow=False),
    "specroute-default-priority": _Shipped(priority_header=True),
    "specroute-no-prefix": _Shipped(latency={"prefix_cache": False}),
    "specroute-no-affinity": _Shipped(affinity=0.0),
    **{f"specroute-sticky{w}": _Shipped(affinity=w / 100) for w in (25, 50, 75, 200)},
    **{
        f"specroute-queue-wait{n}": _Shipped(
            priority_header=True, admission={"priorities": {"standard": {"max_wait": float(n)}}}
        )
        for n in (4, 8, 16)
    },
}


def shipped_sections(path: Path = SHIPPED_POLICY) -> dict[str, Any]:
    """The routing, pools, acceptance, overload, admission and shadow sections of the
    shipped policy."""
    document = yaml.safe_load(path.read_text())
    return {key: document[key] for key in SHIPPED_SECTIONS if key in document}


class PolicyFleet(Protocol):
    """What a policy is built over: simulators, real endpoints, or the planner's fleets."""

    @property
    def specs(self) -> Sequence[SimSpec]: ...

    def backends(self) -> list[dict[str, Any]]: ...


def build_policy(
    name: str,
    fleet: PolicyFleet,
    break_even: dict[str, float] | None = None,
    facts: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The policy document for ``name`` over ``fleet``'s simulators.

    ``facts`` are sections every policy carries whatever its routing, as a deployment
    states its engines' profile (``latency``) and its objectives (``slo``): facts about
    the fleet, not routing choices; only the latency scorer reads them.
    """
    everything = fleet.backends()
    # Only pools the fleet has (a policy may not configure a pool without backends).
    present = {b["pool"] for b in everything}
    break_even = {p: v for p, v in (break_even or BREAK_EVEN).items() if p in present}
    speculative = speculative_names(fleet.specs)
    spec_only = [b for b in everything if b["name"] in speculative]
    plain_only = [b for b in everything if b["name"] not in speculative]
    policy: dict[str, Any] = {"version": name, **(facts or {})}
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
    elif name == "power-of-two":
        policy |= {"backends": everything, "routing": _least_loaded(picker="power_of_two")}
    elif name == "least-prompt-tokens":
        policy |= {"backends": everything, "routing": _least_loaded(1024)}
    elif name in ("specroute-latency", *_LATENCY_EXPERIMENTS):
        params = _LATENCY_EXPERIMENTS.get(name, {})
        policy |= {
            "backends": everything,
            **_specroute("learned", break_even),
            "routing": {"scorers": [{"type": "latency", "weight": 1.0, "params": params}]},
        }
    elif name == "all-speculative":
        policy |= {"backends": spec_only, "routing": _least_loaded()}
    elif name == "all-plain":
        policy |= {"backends": plain_only, "routing": _least_loaded()}
    elif name == "specroute-static":
        policy |= {"backends": everything, **_specroute("static", break_even)}
    elif name == "specroute-learned":
        policy |= {"backends": everything, **_specroute("learned", break_even)}
    elif name in _SHIPPED_VARIANTS:
        shipped = shipped_sections()
        variant = _SHIPPED_VARIANTS[name]
        if variant.overload is not None:
            shipped["overload"] = variant.overload
        if not variant.shadow:
            shipped.pop("shadow", None)
        if not variant.queue:
            shipped["admission"] = {**shipped.get("admission", {}), "enabled": False}
        if variant.priority_header:
            admission = shipped.get("admission", {})
            tenant = {**admission.get("default_tenant", {}), "allow_header": True}
            shipped["admission"] = {**admission, "default_tenant": tenant}
        if variant.admission:
            shipped["admission"] = _over(shipped.get("admission", {}), variant.admission)
        for scorer in shipped["routing"]["scorers"]:
            if scorer["type"] == "latency":
                scorer["params"] = {**scorer["params"], **variant.latency}
        if variant.affinity is not None:
            scorers = [s for s in shipped["routing"]["scorers"] if s["type"] != "prefix_affinity"]
            if variant.affinity:
                scorers.append({"type": "prefix_affinity", "weight": variant.affinity})
            shipped["routing"]["scorers"] = scorers
        pools = {p: v for p, v in shipped.get("pools", {}).items() if p in present}
        cap = variant.cap
        backends = (
            everything if cap is None else [{**b, "max_concurrency": cap} for b in everything]
        )
        policy |= {"backends": backends, **shipped, "pools": pools}
    elif name == "least-loaded-prefill":
        policy |= {"backends": everything, "routing": _least_loaded(16384)}
    elif name in _EXPERIMENT_SCORERS:
        policy |= {
            "backends": everything,
            **_specroute("learned", break_even),
            "routing": _scorers(*_EXPERIMENT_SCORERS[name]),
        }
    elif name == "specroute-affinity":
        routing = _scorers(4.0, 1.0, 4.0, 16384)
        routing["scorers"].append({"type": "prefix_affinity", "weight": 2.0})
        policy |= {"backends": everything, **_specroute("learned", break_even), "routing": routing}
    else:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")
    return _facts_of_its_pools(policy)


def _over(section: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """``section`` with ``changes`` over it, nested mappings merged key by key."""
    out = dict(section)
    for key, value in changes.items():
        below = out.get(key)
        out[key] = (
            _over(below, value) if isinstance(value, dict) and isinstance(below, dict) else value
        )
    return out


def _facts_of_its_pools(policy: dict[str, Any]) -> dict[str, Any]:
    """``policy`` with its ``latency`` section naming only pools it has backends in (a
    policy may not configure a pool without backends; all-plain has one pool)."""
    latency = policy.get("latency")
    if latency is None or "pools" not in latency:
        return policy
    present = {b["pool"] for b in policy["backends"]}
    pools = {p: path for p, path in latency["pools"].items() if p in present}
    kept = {k: v for k, v in latency.items() if k != "pools"}
    return {**policy, "latency": {**kept, "pools": pools} if pools else kept}
