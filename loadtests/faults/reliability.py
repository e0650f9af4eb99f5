"""``specroute bench reliability-table``: the Reliability table of loadtests/README.md, from
the saved reports of the last soak and chaos runs.

It reads ``results.json`` of the newest ``loadtests/reports/soak-*`` and ``chaos-*`` folders
(or the ones given), prints the table, and with ``--write`` puts it into the README between
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
    return [
        f"chaos, {shape['concurrency']} clients (`{folder.name}`)",
        f"{total['requests']:,} streaming and unary SDK requests through 2 replicas",
        f"{len(faults)} fault windows: {', '.join(faults)}",
        f"{total['hung']} hung, {total['truncated']} truncated; {total['failed']} failed "
        f"visibly, each accounted ({unexplained} unexplained); in flight 0: "
        f"{r['inflight_after']['all_zero']}",
        "PASS" if r["ok"] else "FAIL",
    ]


FUZZ_ROW = ["fuzz", "see Fuzz section", "see Fuzz section", "see Fuzz section", "see Fuzz section"]


def render(soak: Path | None, chaos: Path | None) -> str:
    rows = []
    if soak is not None:
        # Judged again by today's rule (the verdicts saved with a run are its code's).
        rows.append(soak_row(judge(load(soak)), soak))
    if chaos is not None:
        rows.append(chaos_row(load(chaos), chaos))
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
    parser.add_argument("--chaos", type=Path, default=None, help="a chaos report folder")
    parser.add_argument("--write", action="store_true", help=f"into {README.name}")
    args = parser.parse_args(argv)
    soak = args.soak or newest("soak")
    chaos = args.chaos or newest("chaos")
    if soak is None and chaos is None:
        parser.error(f"no soak or chaos report under {REPORTS}")
    text = render(soak, chaos)
    print(text)
    if args.write:
        write(README, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
