"""One backend, one launch config, one policy: what the per-engine launch tests check with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from proxy.check import ModelResolver, check_deployment
from proxy.policy import load_policy

REPO = Path(__file__).resolve().parents[3]
# The policy's speculation for each shipped variant (the file's name says which).
SPECULATION = {
    "plain": {"method": "none", "k": 0},
    "ngram": {"method": "ngram", "k": 4},
    "eagle3": {"method": "eagle3", "k": 3},
}
SHIPPED = {
    engine: sorted(
        p
        for p in (REPO / "deploy" / engine / "gpu").glob("*/*.yaml")
        if p.name != "kustomization.yaml"
    )
    for engine in ("vllm", "sglang", "trtllm")
}
NOT_LOCAL = "draft vocabulary not checked"


def shipped(engine: str, name: str) -> dict[str, Any]:
    """A shipped launch config of ``engine`` (``name``: ``<model>/<variant>``) as a mapping."""
    loaded: dict[str, Any] = yaml.safe_load(
        (REPO / "deploy" / engine / "gpu" / f"{name}.yaml").read_text()
    )
    return loaded


def check(
    tmp_path: Path,
    engine: str,
    launch: dict[str, Any] | Path,
    speculation: dict[str, Any],
    model: str,
    url: str = "http://engine:8000",
) -> list[str]:
    """Findings for a policy with one ``engine`` backend whose launch config is ``launch``."""
    if isinstance(launch, Path):
        launch_path = launch
    else:
        launch_path = tmp_path / "launch.yaml"
        launch_path.write_text(yaml.safe_dump(launch))
    backend = {
        "name": "e-0",
        "url": url,
        "model": model,
        "pool": "p",
        "engine": engine,
        "speculation": speculation,
        "launch_config": str(launch_path),
    }
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({"backends": [backend]}))
    report = check_deployment(load_policy(policy), policy, ModelResolver())
    assert report.engines_checked == (
        0 if any("cannot read" in str(f) for f in report.findings) else 1
    )
    return [str(f) for f in report.findings if NOT_LOCAL not in f.message]
