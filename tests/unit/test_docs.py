"""The reference generator's own logic: what counts as stale, which benchmarks a usage text
lists, and the policy's fields described from the source when the model has no words."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from proxy import docs


def test_stale_names_changed_missing_and_leftover_files(tmp_path: Path) -> None:
    (tmp_path / "docs" / "reference").mkdir(parents=True)
    (tmp_path / "docs" / "assets" / "figures").mkdir(parents=True)
    (tmp_path / "docs" / "reference" / "same.md").write_text("a\n")
    (tmp_path / "docs" / "reference" / "changed.md").write_text("old\n")
    (tmp_path / "docs" / "assets" / "figures" / "gone.png").write_bytes(b"x")
    files = {
        Path("docs/reference/same.md"): b"a\n",
        Path("docs/reference/changed.md"): b"new\n",
        Path("docs/reference/missing.md"): b"m\n",
    }
    assert set(docs.stale(tmp_path, files)) == {
        Path("docs/reference/changed.md"),
        Path("docs/reference/missing.md"),
        Path("docs/assets/figures/gone.png"),
    }


def test_listed_benchmarks_reads_the_usage_text() -> None:
    usage = (
        "usage: specroute bench <benchmark> [options]\n\nbenchmarks:\n"
        "  load        drive an endpoint\n  break-even  speculative vs plain\n\n"
        "'specroute bench <benchmark> --help' lists a benchmark's options.\n"
    )
    assert docs._listed_benchmarks(usage) == ["load", "break-even"]


class _Example(BaseModel):
    # Said above the field, in the source.
    commented: int = 3
    described: str = Field(default="x", description="said by the field")
    bare: bool = False


def test_model_fields_take_the_description_or_the_comment_above() -> None:
    fields = {f.name: f for f in docs.model_fields(_Example, _Example.model_json_schema())}
    assert fields["commented"].description == "Said above the field, in the source."
    assert fields["described"].description == "said by the field"
    assert fields["bare"].description == ""
    assert (fields["commented"].type, fields["commented"].default) == ("int", "`3`")
    plain = docs.model_fields(_Example, _Example.model_json_schema(), comments=False)
    assert plain[0].description == ""
