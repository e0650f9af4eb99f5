"""A TensorRT-LLM launch config (``--extra_llm_api_options``) against its schema and the policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.unit.check.launch_fleet import SPECULATION, check, shipped

EAGLE3 = SPECULATION["eagle3"]
NGRAM = SPECULATION["ngram"]
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def planted(variant: str = "eagle3", **changes: Any) -> dict[str, Any]:
    """The shipped Llama 3.1 8B config; ``changes`` to the top level or, as
    ``spec={...}``, to its speculative_config (None deletes a key)."""
    opts = shipped("trtllm", f"llama-3.1-8b/{variant}")
    for key, value in changes.pop("spec", {}).items():
        if value is None:
            opts["speculative_config"].pop(key, None)
        else:
            opts["speculative_config"][key] = value
    for key, value in changes.items():
        if value is None:
            opts.pop(key, None)
        else:
            opts[key] = value
    return opts


def trtllm(
    tmp_path: Path, opts: dict[str, Any], speculation: dict[str, Any] = EAGLE3, **kw: Any
) -> list[str]:
    return check(tmp_path, "trtllm", opts, speculation, kw.pop("model", MODEL), **kw)


def test_an_unknown_field_is_refused_at_every_level(tmp_path: Path) -> None:
    findings = trtllm(
        tmp_path,
        planted(
            max_num_seqs=256,
            kv_cache_config={"free_gpu_memory_fraction": 0.9, "enable_prefix_caching": True},
            spec={"num_speculative_tokens": 3},
        ),
    )
    assert len(findings) == 3, findings
    assert any(": max_num_seqs is not a field of TensorRT-LLM 7b437aaa73bf" in f for f in findings)
    assert any("kv_cache_config.enable_prefix_caching is not a field" in f for f in findings)
    assert any("speculative_config.num_speculative_tokens is not a field" in f for f in findings)


def test_metrics_off_is_refused(tmp_path: Path) -> None:
    [finding] = trtllm(tmp_path, planted(return_perf_metrics=None))
    assert "return_perf_metrics is not true: trtllm-serve mounts no /prometheus/metrics" in finding
    [finding] = trtllm(tmp_path, planted(enable_iter_perf_stats=False))
    assert "enable_iter_perf_stats is not true" in finding and finding.startswith("error: ")


def test_a_method_other_than_the_policys_is_refused(tmp_path: Path) -> None:
    [finding] = trtllm(tmp_path, planted("ngram"), {"method": "eagle3", "k": 4})
    assert "the policy says eagle3, the engine runs NGram" in finding
    findings = trtllm(tmp_path, planted(spec={"decoding_type": "Eagle3"}))
    assert any("speculative_config.decoding_type Eagle3 is not one of" in f for f in findings)
    assert any("the policy says eagle3, the engine does not speculate" in f for f in findings)
    findings = trtllm(tmp_path, planted(spec={"decoding_type": "Lookahead"}))
    assert any("decoding_type Lookahead does not run on the PyTorch backend" in f for f in findings)


def test_k_and_the_required_speculative_fields(tmp_path: Path) -> None:
    [finding] = trtllm(tmp_path, planted(spec={"max_draft_len": 5}))
    assert "the policy's k=3 but the engine drafts 5 per step (max_draft_len=5)" in finding
    [finding] = trtllm(tmp_path, planted(spec={"speculative_model_dir": None}))
    assert "decoding_type Eagle needs speculative_model_dir" in finding
    [finding] = trtllm(tmp_path, planted("ngram", spec={"max_matching_ngram_size": None}), NGRAM)
    assert "NGram needs max_matching_ngram_size above 0" in finding


def test_the_served_name_is_the_model_field(tmp_path: Path) -> None:
    [finding] = trtllm(tmp_path, planted(), model="llama-3.1-8b")
    assert f"clients ask for 'llama-3.1-8b', the engine serves {MODEL}" in finding
    # A local directory is served under its last component.
    assert trtllm(tmp_path, planted(model="/models/llama-3.1-8b"), model="llama-3.1-8b") == []
