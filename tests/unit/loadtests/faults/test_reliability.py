"""The Reliability table: one chaos row per face, from each run's saved report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from loadtests.faults.reliability import render


def _chaos(folder: Path, face: str | None, *, equal: bool) -> Path:
    shape: dict[str, Any] = {"concurrency": 256}
    if face is not None:
        shape["face"] = face
    total = {"requests": 1000, "hung": 0, "truncated": 0, "failed": 2}
    results = {
        "shape": shape,
        "total": total,
        "windows": {"baseline": {}, "envoy-kill": {}},
        "failures": [{"why": "the connection broke"}, {"why": "unexplained: HTTP 500"}],
        "inflight_after": {"all_zero": True},
        "accounting_after": {"equal": equal},
        "ok": equal,
    }
    folder.mkdir()
    (folder / "results.json").write_bytes(orjson.dumps(results))
    return folder


def test_each_face_gets_its_row_with_its_accounting(tmp_path: Path) -> None:
    serve = _chaos(tmp_path / "chaos-1", None, equal=True)  # a report from before faces
    envoy = _chaos(tmp_path / "chaos-2", "envoy", equal=False)
    rows = render(None, [serve, envoy]).splitlines()[2:]
    assert len(rows) == 3  # two chaos rows and the fuzz row
    assert "2 `specroute serve` replicas" in rows[0] and rows[0].endswith("PASS |")
    assert "2 pickers, each behind an Envoy" in rows[1] and rows[1].endswith("FAIL |")
    assert "engine = replica counters after the faults: False" in rows[1]
    assert "(1 unexplained)" in rows[1]
