"""The defaults matrix's points: which factor of a trace's rate each load replays."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtests.planning.defaults_matrix import LOADS, build_parser, build_points


def _points(tmp_path: Path, *argv: str) -> dict[str, tuple[float, float]]:
    args = build_parser().parse_args(["--priorities", "", *argv])
    return {
        f"{p.trace} {p.load}": (p.factor, len(p.schedule) / p.duration_s)
        for p in build_points(args, tmp_path)
    }


def test_a_load_replays_its_traces_factor_unless_told_another(tmp_path: Path) -> None:
    argv = ("--traces", "production", "mooncake-docs", "--loads", "medium", "heavy")
    shipped = _points(tmp_path, *argv)
    moved = _points(tmp_path, *argv, "--factor", "heavy=8")
    for name, (factor, rate) in shipped.items():
        trace, load = name.split()
        assert factor == LOADS[trace][load]
        if load == "heavy":
            # The same requests, arriving eight times as fast as the trace's own rate
            # where the shipped factor made them arrive ``factor`` times as fast.
            assert moved[name][0] == 8.0
            assert moved[name][1] == pytest.approx(rate * 8.0 / factor, rel=0.1)
        else:
            assert moved[name] == (factor, rate)


def test_a_factor_must_name_a_load() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--factor", "peak=8"])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--factor", "heavy"])
