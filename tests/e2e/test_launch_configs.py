"""The GPU launch configs, and the engine command lines of every overlay, read by vLLM's parser.

No engine starts and nothing is downloaded (``HF_HUB_OFFLINE=1``): the vLLM CPU build's
own ``vllm serve`` parser reads each ``--config`` file (tests/e2e/vllm_parse.py). The
speculative configs' keys and methods are checked against vLLM's ``SpeculativeConfig``.
Then ``specroute check`` runs on real (tiny) model directories with real tokenizers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.vllm.cpu.server_args import venv_python
from proxy.check import ModelResolver, check_deployment
from proxy.policy import load_policy
from tests.kustomize_render import OVERLAYS, REPO, Rendered, container, kustomize

GPU_CONFIGS = sorted(
    p for p in (REPO / "deploy/vllm/gpu").glob("*/*.yaml") if p.name != "kustomization.yaml"
)
CONTROLS = {
    "control: misspelt option": {"model": "org/m", "tensor-paralel-size": 2},
    "control: unknown speculative key": {
        "model": "org/m",
        "speculative-config": {"method": "eagle3", "model": "h", "num_speculative_token": 3},
    },
    "control: unknown method": {
        "model": "org/m",
        "speculative-config": {"method": "eagle4", "num_speculative_tokens": 3},
    },
}


def _engine_argv(rendered: Rendered, engine: dict[str, Any], into: Path) -> list[str]:
    """``vllm serve`` as the engine container runs it, its mounted launch config in ``into``."""
    volumes = {v["name"]: v for v in engine["spec"]["template"]["spec"]["volumes"]}
    mount = next(m for m in container(engine)["volumeMounts"] if m["mountPath"] == "/etc/vllm")
    data = rendered.get("ConfigMap", volumes[mount["name"]]["configMap"]["name"])["data"]
    (into / "launch.yaml").write_text(data["launch.yaml"])
    assert container(engine)["command"] == ["vllm", "serve"]
    return [
        "serve",
        *(
            str(into / "launch.yaml") if a == "/etc/vllm/launch.yaml" else a
            for a in container(engine)["args"]
        ),
    ]


@pytest.fixture(scope="module")
def parsed(
    vllm_model_dirs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, Any]]:
    """Every command line's parse result, by name; one vLLM process for all (its import is ~10 s)."""
    tmp = tmp_path_factory.mktemp("launch")
    argvs = {str(p.relative_to(REPO)): ["serve", "--config", str(p)] for p in GPU_CONFIGS}
    for overlay in OVERLAYS:
        rendered = Rendered(overlay, kustomize(overlay))
        for engine in rendered.engines():
            where = tmp / overlay.name / engine["metadata"]["name"]
            where.mkdir(parents=True)
            argvs[f"{overlay.name}/{engine['metadata']['name']}"] = _engine_argv(
                rendered, engine, where
            )
    for name, opts in CONTROLS.items():
        path = tmp / f"{len(argvs)}.yaml"
        path.write_text(yaml.safe_dump(opts))
        argvs[name] = ["serve", "--config", str(path)]
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
    }
    out = subprocess.run(
        ["nice", str(venv_python()), str(Path(__file__).with_name("vllm_parse.py"))],
        input=json.dumps(list(argvs.values())),
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=300,
    ).stdout
    return dict(zip(argvs, json.loads(out), strict=True))


def test_every_gpu_launch_config_is_accepted_by_vllm(parsed: dict[str, dict[str, Any]]) -> None:
    assert len(GPU_CONFIGS) == 12
    for path in GPU_CONFIGS:
        result = parsed[str(path.relative_to(REPO))]
        assert result["ok"], (path, result["error"])
        spec = result["speculative_config"]
        # vLLM refuses per-request metrics without speculation once it builds the engine
        # config (vllm/config/vllm.py), which needs the model: checked here from the parse.
        assert (result["per_request_spec_decode_metrics"] == "summary") == (spec is not None), path
        assert (spec is None) == (path.stem == "plain"), path
        if spec is not None:
            assert spec["method"] == path.stem
            assert spec["num_speculative_tokens"] >= 1
        if path.stem == "eagle3":
            assert spec["draft_tensor_parallel_size"] in (1, result["tensor_parallel_size"])
        if "-tp" in path.parent.name:
            assert result["tensor_parallel_size"] == int(path.parent.name.rsplit("-tp", 1)[1])


def test_every_overlay_engine_command_is_accepted_by_vllm(
    parsed: dict[str, dict[str, Any]],
) -> None:
    engines = {k: v for k, v in parsed.items() if k.split("/")[0] in {o.name for o in OVERLAYS}}
    assert len(engines) == 3 * len(OVERLAYS)
    for name, result in engines.items():
        assert result["ok"], (name, result["error"])
    # Arguments after --config override the file (the dev overlay shares one GPU).
    assert parsed["single-gpu-dev/vllm-eagle3"]["gpu_memory_utilization"] == 0.28
    assert parsed["llama-3.3-70b-h100/vllm-eagle3"]["gpu_memory_utilization"] == 0.90


def test_the_parse_refuses_what_vllm_would_refuse(parsed: dict[str, dict[str, Any]]) -> None:
    assert "tensor-paralel-size" in parsed["control: misspelt option"]["error"]
    assert "num_speculative_token" in parsed["control: unknown speculative key"]["error"]
    assert "eagle4" in parsed["control: unknown method"]["error"]


def test_specroute_check_on_real_model_directories(
    vllm_model_dirs: dict[str, Path], tmp_path: Path
) -> None:
    """The tiny models built for the e2e tier: a real tokenizer.json and config.json each."""
    target, draft = vllm_model_dirs["tiny"], vllm_model_dirs["draft-good"]
    odd = tmp_path / "odd-draft"
    shutil.copytree(draft, odd, ignore=shutil.ignore_patterns("*.safetensors"))
    config = json.loads((odd / "config.json").read_text())
    (odd / "config.json").write_text(json.dumps(config | {"vocab_size": config["vocab_size"] + 64}))
    for name, drafter in (("good", draft), ("odd", odd)):
        launch = {
            "model": str(target),
            "served-model-name": "tiny",
            "per-request-spec-decode-metrics": "summary",
            "speculative-config": {
                "method": "draft_model",
                "model": str(drafter),
                "num_speculative_tokens": 3,
            },
        }
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(launch))
        backend = {
            "name": "d-0",
            "url": "http://d:8000",
            "model": "tiny",
            "pool": "d",
            "speculation": {"method": "draft_model", "k": 3},
            "launch_config": f"{name}.yaml",
        }
        (tmp_path / f"policy-{name}.yaml").write_text(yaml.safe_dump({"backends": [backend]}))
    good = tmp_path / "policy-good.yaml"
    assert [
        str(f) for f in check_deployment(load_policy(good), good, ModelResolver()).findings
    ] == []
    odd_policy = tmp_path / "policy-odd.yaml"
    [finding] = check_deployment(load_policy(odd_policy), odd_policy, ModelResolver()).findings
    assert f"draft vocab_size {config['vocab_size'] + 64}" in str(finding)
