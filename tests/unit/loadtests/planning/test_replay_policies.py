"""What ``specroute bench replay --policies`` offers a user: the static baselines and what
ships; the experiments stay reachable for the benchmark that measures them."""

from __future__ import annotations

import pytest

from loadtests.planning import replay
from loadtests.routing import routing_quality
from loadtests.routing.routing_policies import EXPERIMENTS, POLICIES, STATIC_POLICIES

OFFERED = (*STATIC_POLICIES, "specroute-learned", "specroute-default")


@pytest.mark.parametrize("name", OFFERED)
def test_replay_takes_a_baseline_or_what_ships(name: str) -> None:
    args = replay.build_parser().parse_args(["trace.jsonl", "--policies", name])
    assert args.policies == [name]


@pytest.mark.parametrize("name", [p for p in POLICIES if p not in OFFERED])
def test_replay_does_not_offer_an_experiment(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        replay.build_parser().parse_args(["trace.jsonl", "--policies", name])
    assert "invalid choice" in capsys.readouterr().err


def test_replay_help_names_no_experiment() -> None:
    text = replay.build_parser().format_help()
    assert all(name in text for name in OFFERED)
    assert not [name for name in EXPERIMENTS if name in text]


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_routing_quality_still_runs_an_experiment_by_name(name: str) -> None:
    plan, _ = routing_quality.parse_args(["--policies", name])
    assert plan.policies == (name,)
