"""``specroute bench reliability-table``: the Reliability table of loadtests/README.md, from
the saved reports of the last soak and chaos runs.

It reads ``results.json`` of the newest ``loadtests/reports/soak-*`` folder and of the newest
``chaos-*`` folder of each face (``serve``, and ``envoy``: pickers behind Envoy), or the
ones given, prints the table, and with ``--write`` puts it into the README between
the ``<!-- reliability-table -->`` markers, so the figures there are always a run's own.
The fuzz row points at its section: its figures come from the test suite, not a report.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from loadtests.faults.soak import judge
from loadtests.tools.report import REPORTS, table

README = Path(__file__).resolve().parents[1] / "README.md"
BEGIN, END = "<!-- reliability-table -->", "<!-- /reliability-table -->"
HEAD = ["check", "load held", "faults survived / inputs tried", "nothing lost", "verdict"]


def newest(benchmark: str) -> Path | None:
    found = sorted(REPORTS.glob(f"{benchmark}-*/results.json"))
    return found[-1].parent if found else None


def newest_per_face() -> list[Path]:
    """The newest chaos report of each face (a report before faces existed is ``serve``)."""
    latest: dict[str, Path] = {}
    for found in sorted(REPORTS.glob("chaos-*/results.json")):
        face = load(found.parent)["shape"].get("face", "serve")
        latest[face] = found.parent
    return [latest[face] for face in sorted(latest, key=lambda f: f != "serve")]


def load(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads((folder / "results.json").read_bytes())
    return data


def soak_row(r: dict[str, Any], folder: Path) -> list[str]:
    shape, total = r["shape"], r["total"]
    kinds = len(r["by_kind"])
    structures = len(r["verdicts"])
    growing = len(r["growing"])
    rss = [v for v in r["verdicts"] if v["series"].endswith("rss_mib")]
    rss_text = ", ".join(f"{v['slope_per_10min']:+.2f}" for v in rss)
    return [
        f"soak, {shape['minutes']:g} min (`{folder.name}`)",
        f"{total['requests']:,} requests from {shape['concurrency']} SDK clients, "
        f"{kinds} kinds (chat, completions, Responses; streamed and not; embeddings) "
        "through 2 replicas on one Redis",
        f"{r['policy_reloads']} policy reloads; a canary ramp ({r['canary'].get('state')}); "
        f"{total['cancelled']:,} clients left mid-stream",
        f"{total['hung']} hung, {total['truncated']} truncated, {total['failed']} failed; "
        f"in flight 0: {r['inflight_after']['all_zero']}; engine = gateway counters: "
        f"{r['counters_equal']}; growing after warm-up: {growing} of {structures} series "
        f"(RSS {rss_text} MiB per 10 min)",
        "PASS" if r["ok"] else "FAIL",
    ]


def chaos_row(r: dict[str, Any], folder: Path) -> list[str]:
    shape, total = r["shape"], r["total"]
    faults = [f for f in r["windows"] if f != "baseline"]
    failures = r.get("failures", [])
    unexplained = sum(str(f["why"]).startswith("unexplained") for f in failures)
    replicas = (
        "2 pickers, each behind an Envoy"
        if shape.get("face") == "envoy"
        else "2 `specroute serve` replicas"
    )
    accounting = r.get("accounting_after")
    counted = (
        ""
        if accounting is None
        else f"; engine = replica counters after the faults: {accounting['equal']}"
    )
    return [
        f"chaos, {shape['concurrency']} clients (`{folder.name}`)",
        f"{total['requests']:,} streaming and unary SDK requests through {replicas}",
        f"{len(faults)} fault windows: {', '.join(faults)}",
        f"{total['hung']} hung, {total['truncated']} truncated; {total['failed']} failed "
        f"visibly, each accounted ({unexplained} unexplained); in flight 0: "
        f"{r['inflight_after']['all_zero']}{counted}",
        "PASS" if r["ok"] else "FAIL",
    ]


FUZZ_ROW = ["fuzz", "see Fuzz section", "see Fuzz section", "see Fuzz section", "see Fuzz section"]


def render(soak: Path | None, chaos: Sequence[Path]) -> str:
    rows = []
    if soak is not None:
        # Judged again by today's rule (the verdicts saved with a run are its code's).
        rows.append(soak_row(judge(load(soak)), soak))
    rows.extend(chaos_row(load(folder), folder) for folder in chaos)
    rows.append(FUZZ_ROW)
    return table(HEAD, rows)


def write(readme: Path, text: str) -> None:
    page = readme.read_text()
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"{readme}: no {BEGIN} ... {END} block to fill")
    readme.write_text(page[: start + len(BEGIN)] + "\n" + text + "\n" + page[end:])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specroute bench reliability-table", description=__doc__)
    parser.add_argument("--soak", type=Path, default=None, help="a soak report folder")
    parser.add_argument(
        "--chaos", type=Path, action="append", help="a chaos report folder (again for more)"
    )
    parser.add_argument("--write", action="store_true", help=f"into {README.name}")
    args = parser.parse_args(argv)
    soak = args.soak or newest("soak")
    chaos = args.chaos or newest_per_face()
    if soak is None and not chaos:
        parser.error(f"no soak or chaos report under {REPORTS}")
    text = render(soak, chaos)
    print(text)
    if args.write:
        write(README, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
