"""Where benchmark results go, and the small formatting helpers the reports share.

Each run writes a folder ``loadtests/reports/<benchmark>-<UTC time>/`` (or ``--out``) with
``report.md``, ``results.json`` and PNG plots; the markdown is also printed.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from matplotlib.figure import Figure

REPORTS = Path(__file__).resolve().parents[1] / "reports"


def report_dir(benchmark: str, out: Path | None) -> Path:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = out if out is not None else REPORTS / f"{benchmark}-{stamp}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def machine() -> dict[str, Any]:
    with open("/proc/loadavg") as f:
        load = [float(v) for v in f.read().split()[:3]]
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "loadavg": load}


def write_json(folder: Path, results: dict[str, Any]) -> None:
    (folder / "results.json").write_bytes(
        orjson.dumps(results, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
    )


def write_outputs(folder: Path, markdown: str, results: dict[str, Any]) -> None:
    (folder / "report.md").write_text(markdown)
    write_json(folder, results)


def publish(
    benchmark: str, out: Path | None, results: dict[str, Any], render: Callable[[Path], str]
) -> int:
    """Write a benchmark's markdown and JSON report, print the markdown; the exit status."""
    return publish_in(report_dir(benchmark, out), results, render)


def publish_in(folder: Path, results: dict[str, Any], render: Callable[[Path], str]) -> int:
    """``publish`` into a report folder the benchmark already made (it saved its raw
    results there first, so a long run is never lost to a report error)."""
    markdown = render(folder)
    write_outputs(folder, markdown, results)
    print(markdown)
    print(f"report: {folder}", file=sys.stderr)
    return 0


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table (first column left-aligned, the rest right-aligned)."""
    align = [":--"] + ["--:"] * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def figure(rows: int = 1, cols: int = 1, size: tuple[float, float] = (8, 4.5)) -> Any:
    """A matplotlib figure on the Agg backend (no display needed): ``(fig, axes)``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(rows, cols, figsize=size, squeeze=False)


def save(fig: Figure, path: Path) -> str:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name
