"""An SGLang launch config: what SGLang's parser would refuse, and what the policy contradicts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proxy.check.sglang_options import SGLANG_OPTIONS
from tests.unit.check.launch_fleet import SPECULATION, check, shipped

EAGLE3 = SPECULATION["eagle3"]
NGRAM = SPECULATION["ngram"]


def planted(variant: str = "eagle3", **changes: Any) -> dict[str, Any]:
    """The shipped Llama 3.1 8B config with ``changes`` (None deletes a key)."""
    opts = shipped("sglang", f"llama-3.1-8b/{variant}")
    for key, value in changes.items():
        if value is None:
            opts.pop(key, None)
        else:
            opts[key] = value
    return opts


def sglang(
    tmp_path: Path, opts: dict[str, Any], speculation: dict[str, Any] = EAGLE3, **kw: Any
) -> list[str]:
    return check(tmp_path, "sglang", opts, speculation, "llama-3.1-8b", **kw)


def test_the_options_table_is_sglangs_parser() -> None:
    assert SGLANG_OPTIONS["enable-metrics"].kind == "flag"
    assert SGLANG_OPTIONS["speculative-num-steps"].value_type == "int"
    assert SGLANG_OPTIONS["model"] == SGLANG_OPTIONS["model-path"]  # one action, two names
    assert "speculative_algorithm" not in SGLANG_OPTIONS  # dashed names only
    assert SGLANG_OPTIONS["speculative-ngram-match-type"].choices == ("BFS", "PROB")


def test_a_misspelt_flag_is_refused(tmp_path: Path) -> None:
    [finding] = sglang(tmp_path, planted(**{"speculative-num-stepz": 3}))
    assert finding.startswith("error: backend e-0: ")
    assert "speculative-num-stepz is not an option of SGLang 0.5.23" in finding


def test_abbreviations_are_taken_as_sglangs_parser_takes_them(tmp_path: Path) -> None:
    [finding] = sglang(tmp_path, planted(**{"speculative-num-step": 3}))
    assert finding.startswith("warning: ")
    assert "speculative-num-step abbreviates speculative-num-steps: write it in full" in finding
    [finding] = sglang(tmp_path, planted(**{"speculative-num": 3}))
    assert finding.startswith("error: ") and "is ambiguous to SGLang's parser" in finding


def test_an_underscore_key_is_refused_with_its_dashed_spelling(tmp_path: Path) -> None:
    opts = planted(**{"enable-metrics": None, "enable_metrics": True})
    findings = sglang(tmp_path, opts)
    assert any("write enable-metrics: --config passes keys as written" in f for f in findings)
    assert any("enable-metrics is not set: SGLang serves no /metrics" in f for f in findings)


def test_metrics_off_is_refused(tmp_path: Path) -> None:
    for value in (False, None):
        [finding] = sglang(tmp_path, planted(**{"enable-metrics": value}))
        assert "enable-metrics is not set" in finding and finding.startswith("error: ")


def test_values_are_checked_as_the_parser_would(tmp_path: Path) -> None:
    findings = sglang(
        tmp_path,
        planted(
            "ngram",
            **{
                "speculative-ngram-match-type": "DFS",
                "enable-cache-report": "yes",
                "mem-fraction-static": "most",
                "enable-dp-attention": True,
            },
        ),
        NGRAM,
    )
    assert len(findings) == 4, findings
    assert any("'DFS' is not one of BFS, PROB" in f for f in findings)
    assert any("enable-cache-report is a flag: write true or false" in f for f in findings)
    assert any("mem-fraction-static: 'most' is not a float" in f for f in findings)
    assert any("enable-dp-attention: SGLang refuses it in a --config file" in f for f in findings)


def test_a_method_other_than_the_policys_is_refused(tmp_path: Path) -> None:
    [finding] = sglang(tmp_path, planted("ngram"), {"method": "eagle3", "k": 4})
    assert "the policy says eagle3, the engine runs NGRAM" in finding
    findings = sglang(tmp_path, planted(**{"speculative-algorithm": "EAGLE4"}))
    assert any(
        "speculative-algorithm EAGLE4 is not built into SGLang 0.5.23" in f for f in findings
    )
    assert any("the policy says eagle3, the engine runs EAGLE4" in f for f in findings)


def test_k_is_the_steps_for_eagle_and_the_draft_tokens_less_one_for_ngram(tmp_path: Path) -> None:
    [finding] = sglang(
        tmp_path, planted(**{"speculative-num-steps": 5, "speculative-num-draft-tokens": 6})
    )
    assert "the policy's k=3 but the engine drafts 5 per step (speculative-num-steps=5)" in finding
    [finding] = sglang(tmp_path, planted("ngram", **{"speculative-num-draft-tokens": 8}), NGRAM)
    assert "the policy's k=4 but the engine drafts 7 per step" in finding
    [finding] = sglang(tmp_path, planted(**{"speculative-num-steps": None}))
    assert "draft tokens per step not set" in finding


def test_a_chain_with_draft_tokens_sglang_would_reset_is_a_warning(tmp_path: Path) -> None:
    [finding] = sglang(tmp_path, planted(**{"speculative-num-draft-tokens": 8}))
    assert finding.startswith("warning: ")
    assert "SGLang resets it to speculative-num-steps + 1 = 4" in finding


def test_a_speculative_engine_where_the_policy_says_plain_is_refused(tmp_path: Path) -> None:
    [finding] = sglang(tmp_path, planted(), SPECULATION["plain"])
    assert "the policy says no speculation, the engine drafts (EAGLE3)" in finding


def test_the_served_name_and_the_port_are_compared_with_the_backend(tmp_path: Path) -> None:
    [finding] = sglang(tmp_path, planted(**{"served-model-name": "llama-8b"}))
    assert "clients ask for 'llama-3.1-8b', the engine serves llama-8b" in finding
    [finding] = sglang(tmp_path, planted(**{"served-model-name": None}))
    assert "the engine serves meta-llama/Llama-3.1-8B-Instruct" in finding
    [finding] = sglang(tmp_path, planted(), url="http://engine:30000")
    assert finding.startswith("warning: ")
    assert "the backend's url says port 30000, the launch config 8000" in finding
