"""Small builders for policies in unit tests."""

from __future__ import annotations

from typing import Any

from proxy.policy import Policy
from proxy.routing.acceptance import AcceptanceTracker
from proxy.routing.breakeven import BreakEvenModel
from proxy.routing.fleet import Fleet
from proxy.routing.scheduler.scheduler import Scheduler


def backend(name: str, pool: str, method: str = "none", k: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "url": f"http://127.0.0.1:1/{name}",
        "model": extra.pop("model", "m"),
        "pool": pool,
        "speculation": {"method": method, "k": k},
        **extra,
    }


def make_policy(*backends: dict[str, Any], **sections: Any) -> Policy:
    return Policy.model_validate({"backends": list(backends), **sections})


def mixed_fleet(**sections: Any) -> Policy:
    """One plain, one n-gram and one EAGLE-3 backend serving model 'm'."""
    return make_policy(
        backend("plain-0", "plain"),
        backend("ngram-0", "ngram", "ngram", 4),
        backend("eagle-0", "eagle3", "eagle3", 3),
        **sections,
    )


def healthy_scheduler(policy: Policy, plugin_modules: tuple[str, ...] = ()) -> Scheduler:
    """A scheduler over a fresh fleet of the policy, every backend healthy."""
    fleet = Fleet(policy)
    for b in fleet.backends.values():
        b.healthy = True
    acceptance = AcceptanceTracker(policy.acceptance)
    return Scheduler(
        policy, fleet, acceptance, BreakEvenModel(policy), plugin_modules=plugin_modules
    )
