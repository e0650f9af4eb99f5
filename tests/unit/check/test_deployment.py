"""``specroute check``: a correct fleet passes, each seeded mistake is refused with its reason.

The fleet is built in a temporary directory: tiny model directories (config.json and a
tokenizer.json, no weights), one vLLM launch config per engine and a policy naming them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy.check import ModelResolver, check_deployment, load_launch_config
from proxy.cli import main
from proxy.policy import load_policy

TOKENS = ["<s>", "</s>", "the", "def", "return", "(", ")", ":"]


def write_model(root: Path, name: str, vocab_size: int, **extra: Any) -> Path:
    """A model directory; ``tokens`` (a list, or None for no tokenizer files) in ``extra``."""
    tokens = extra.pop("tokens", TOKENS)
    path = root / name
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"vocab_size": vocab_size, **extra}))
    if tokens is not None:
        tokenizer = {
            "model": {"type": "BPE", "vocab": {t: i for i, t in enumerate(tokens)}},
            "added_tokens": [{"id": 0, "content": tokens[0]}],
        }
        (path / "tokenizer.json").write_text(json.dumps(tokenizer))
    return path


@dataclass
class Fleet:
    root: Path
    models: Path
    policy: Path

    def launch(self, engine: str, **changes: Any) -> None:
        """Rewrite one engine's launch config with ``changes`` (None deletes a key)."""
        path = self.root / "engines" / f"{engine}.yaml"
        opts = yaml.safe_load(path.read_text())
        for key, value in changes.items():
            if value is None:
                opts.pop(key, None)
            else:
                opts[key] = value
        path.write_text(yaml.safe_dump(opts))

    def check(self, *roots: Path) -> list[str]:
        report = check_deployment(
            load_policy(self.policy), self.policy, ModelResolver(roots or (self.models,))
        )
        return [str(f) for f in report.findings]


def _spec(method: str, k: int | str, **extra: Any) -> dict[str, Any]:
    return {"method": method, "num_speculative_tokens": k, **extra}


@pytest.fixture
def fleet(tmp_path: Path) -> Fleet:
    models = tmp_path / "models"
    write_model(models, "org/target", 512)
    write_model(models, "org/draft", 512)
    write_model(models, "org/eagle3-head", 512, draft_vocab_size=128, tokens=None)
    engines = tmp_path / "engines"
    engines.mkdir()
    common = {"model": "org/target", "served-model-name": "tiny", "tensor-parallel-size": 2}
    metrics = {"per-request-spec-decode-metrics": "summary"}
    launch = {
        "plain": common,
        "ngram": {**common, **metrics, "speculative-config": _spec("ngram", 4)},
        "eagle3": {
            **common,
            **metrics,
            "speculative-config": _spec(
                "eagle3", 3, model="org/eagle3-head", draft_tensor_parallel_size=2
            ),
        },
        "draft": {
            **common,
            **metrics,
            "speculative-config": _spec("draft_model", 3, model="org/draft"),
        },
    }
    for name, opts in launch.items():
        (engines / f"{name}.yaml").write_text(yaml.safe_dump(opts))
    methods = {"plain": "none", "ngram": "ngram", "eagle3": "eagle3", "draft": "draft_model"}
    ks = {"plain": 0, "ngram": 4, "eagle3": 3, "draft": 3}
    backends = [
        {
            "name": f"{name}-0",
            "url": f"http://{name}:8000",
            "model": "tiny",
            "pool": name,
            "speculation": {"method": methods[name], "k": ks[name]},
            "launch_config": f"../engines/{name}.yaml",
        }
        for name in launch
    ]
    policy = tmp_path / "policies" / "fleet.yaml"
    policy.parent.mkdir()
    document = {"backends": backends, "shadow": {"reference_pool": "plain", "rate": 0.1}}
    policy.write_text(yaml.safe_dump(document))
    return Fleet(tmp_path, models, policy)


def test_a_correct_fleet_passes(fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    assert fleet.check() == []
    assert main(["check", str(fleet.policy), "--models", str(fleet.models)]) == 0
    assert "ok (4 engine launch configs checked)" in capsys.readouterr().out


def test_per_request_metrics_on_a_plain_engine_is_refused(
    fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet.launch("plain", **{"per-request-spec-decode-metrics": "summary"})
    [finding] = fleet.check()
    assert finding.startswith("error: backend plain-0: ")
    assert "without a speculative-config: vLLM refuses to start" in finding
    assert main(["check", str(fleet.policy), "--models", str(fleet.models)]) == 1
    assert "refused" in capsys.readouterr().out


def test_a_speculative_engine_without_per_request_metrics_is_a_warning(fleet: Fleet) -> None:
    fleet.launch("ngram", **{"per-request-spec-decode-metrics": None})
    [finding] = fleet.check()
    assert finding.startswith("warning: backend ngram-0: ")
    assert "estimates acceptance" in finding


def test_mismatched_vocab_sizes_are_refused(fleet: Fleet) -> None:
    write_model(fleet.models, "org/llama2-head", 32000, tokens=None)
    fleet.launch("eagle3", **{"speculative-config": _spec("eagle3", 3, model="org/llama2-head")})
    [finding] = fleet.check()
    assert finding.startswith("error: backend eagle3-0: ")
    assert "draft vocab_size 32000" in finding
    assert "target's 512" in finding


def test_an_eagle3_draft_vocabulary_larger_than_the_target_is_refused(fleet: Fleet) -> None:
    write_model(fleet.models, "org/wide-head", 512, draft_vocab_size=4096, tokens=None)
    fleet.launch("eagle3", **{"speculative-config": _spec("eagle3", 3, model="org/wide-head")})
    [finding] = fleet.check()
    assert "draft_vocab_size 4096 exceeds the target's vocab_size 512" in finding


def test_a_draft_with_another_tokenizer_of_the_same_size_is_refused(fleet: Fleet) -> None:
    shuffled = list(reversed(TOKENS))
    write_model(fleet.models, "org/other-draft", 512, tokens=shuffled)
    fleet.launch(
        "draft", **{"speculative-config": _spec("draft_model", 3, model="org/other-draft")}
    )
    [finding] = fleet.check()
    assert "the draft's tokenizer" in finding
    assert "is not the target's" in finding


def test_heterogeneous_vocab_drafts_are_left_to_vllm(fleet: Fleet) -> None:
    write_model(fleet.models, "org/other-draft", 600, tokens=["x", "y"])
    spec = _spec("draft_model", 3, model="org/other-draft", use_heterogeneous_vocab=True)
    fleet.launch("draft", **{"speculative-config": spec})
    assert fleet.check() == []


def test_a_speculative_shadow_reference_is_refused(fleet: Fleet) -> None:
    fleet.launch(
        "plain",
        **{"speculative-config": _spec("ngram", 4), "per-request-spec-decode-metrics": "summary"},
    )
    [finding] = fleet.check()
    assert finding.startswith("error: backend plain-0: ")
    assert "the engine drafts (ngram)" in finding
    assert "shadow reference" in finding


def test_method_and_k_disagreeing_with_the_policy_are_refused(fleet: Fleet) -> None:
    fleet.launch("ngram", **{"speculative-config": _spec("suffix", 4)})
    [finding] = fleet.check()
    assert "the policy says ngram, the engine runs suffix" in finding
    fleet.launch("ngram", **{"speculative-config": _spec("ngram", 8)})
    [finding] = fleet.check()
    assert "the policy's k=4 but the engine drafts 8 per step (num_speculative_tokens=8)" in finding


def test_a_method_left_to_vllm_to_guess_is_refused(fleet: Fleet) -> None:
    fleet.launch("eagle3", **{"speculative-config": {"model": "org/eagle3-head"}})
    [finding] = fleet.check()
    assert "no method" in finding


def test_draft_tensor_parallelism_must_be_one_or_the_targets(fleet: Fleet) -> None:
    spec = _spec("eagle3", 3, model="org/eagle3-head", draft_tensor_parallel_size=3)
    fleet.launch("eagle3", **{"speculative-config": spec})
    [finding] = fleet.check()
    assert (
        "draft_tensor_parallel_size=3 must be 1 or the engine's tensor-parallel-size (2)" in finding
    )


def test_a_served_name_other_than_the_policy_model_is_refused(fleet: Fleet) -> None:
    fleet.launch("plain", **{"served-model-name": "tiny-v2"})
    [finding] = fleet.check()
    assert "clients ask for 'tiny', the engine serves tiny-v2" in finding


def test_models_not_on_disk_leave_a_warning_not_a_pass_in_silence(fleet: Fleet) -> None:
    findings = fleet.check(fleet.root / "nowhere")
    assert len(findings) == 2  # eagle3 and draft
    assert all(f.startswith("warning: ") and "not found locally" in f for f in findings)


def test_models_are_found_in_a_hugging_face_cache(fleet: Fleet) -> None:
    cache = fleet.root / "hf"
    for name, vocab in (("org/target", 512), ("org/eagle3-head", 600), ("org/draft", 512)):
        snapshot = f"models--{name.replace('/', '--')}/snapshots/abc123"
        write_model(cache / "hub", snapshot, vocab)
    [finding] = fleet.check(cache)
    assert "draft vocab_size 600" in finding
    assert "/hub/models--org--eagle3-head/snapshots/abc123" in finding


def test_backends_without_launch_config_are_named(fleet: Fleet) -> None:
    document = yaml.safe_load(fleet.policy.read_text())
    del document["backends"][0]["launch_config"]
    fleet.policy.write_text(yaml.safe_dump(document))
    [finding] = fleet.check()
    assert finding.startswith("warning: backend plain-0: no launch_config")
    assert "shadow reference" in finding


def test_launch_configs_read_like_vllm_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "engine.yaml"
    path.write_text(
        "model: org/target\nserved_model_name: [a, b]\ntensor_parallel_size: 4\n"
        'speculative_config: \'{"method": "eagle3", "model": "h", "num_speculative_tokens": 2}\'\n'
    )
    launch = load_launch_config(path)
    assert launch.served_as() == ("a", "b")
    assert launch.tensor_parallel_size == 4
    assert launch.speculative is not None
    assert (launch.speculative.method, launch.speculative.k) == ("eagle3", 2)
    [issue] = launch.issues  # no per-request-spec-decode-metrics on a speculative engine
    assert (issue.level, "estimates acceptance" in issue.message) == ("warning", True)


def test_unreadable_launch_configs_are_refused_with_the_reason(fleet: Fleet) -> None:
    fleet.launch("ngram", **{"speculative-config": _spec("ngram", "four")})
    (fleet.root / "engines" / "plain.yaml").unlink()
    findings = fleet.check()
    assert any("plain.yaml: cannot read" in f for f in findings)
    assert any("num_speculative_tokens must be a whole number, not 'four'" in f for f in findings)
    assert all(f.startswith("error: ") for f in findings)


def test_the_shipped_default_policy_matches_its_gpu_launch_configs() -> None:
    path = Path(__file__).resolve().parents[3] / "policies" / "default.yaml"
    report = check_deployment(load_policy(path), path, ModelResolver())
    assert report.ok, [str(f) for f in report.findings]
    assert report.engines_checked == 3
