"""Every shipped launch config, of every engine, passes ``specroute check`` as its engine."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from proxy.check import LAUNCH_READERS, load_launch_config
from tests.unit.check.launch_fleet import REPO, SHIPPED, SPECULATION, check

# Engine -> the key naming what clients ask for (TensorRT-LLM serves its `model`).
SERVED_KEY = {"vllm": "served-model-name", "sglang": "served-model-name", "trtllm": "model"}
ALL = [(engine, path) for engine, paths in SHIPPED.items() for path in paths]


def test_each_engine_ships_eagle3_and_ngram_for_the_three_models() -> None:
    for engine, paths in SHIPPED.items():
        names = {str(p.relative_to(REPO / "deploy" / engine / "gpu")) for p in paths}
        for model in ("llama-3.1-8b", "llama-3.3-70b-tp4", "qwen3-32b"):
            assert {f"{model}/eagle3.yaml", f"{model}/ngram.yaml"} <= names, (engine, model)
    assert set(LAUNCH_READERS) == set(SHIPPED)


@pytest.mark.parametrize(
    ("engine", "path"), ALL, ids=[f"{e}:{p.parent.name}/{p.stem}" for e, p in ALL]
)
def test_a_shipped_launch_config_passes(tmp_path: Path, engine: str, path: Path) -> None:
    served = str(yaml.safe_load(path.read_text())[SERVED_KEY[engine]])
    findings = check(tmp_path, engine, path, SPECULATION[path.stem], served)
    assert findings == []
    launch = load_launch_config(path, engine)  # type: ignore[arg-type]
    assert launch.engine == engine
    if path.stem == "plain":
        assert launch.speculative is None
    else:
        assert launch.speculative is not None
        assert (launch.speculative.method, launch.speculative.k) == (
            SPECULATION[path.stem]["method"],
            SPECULATION[path.stem]["k"],
        )


def test_a_launch_config_read_as_another_engine_is_refused(tmp_path: Path) -> None:
    path = REPO / "deploy/vllm/gpu/llama-3.1-8b/ngram.yaml"
    findings = check(tmp_path, "sglang", path, SPECULATION["ngram"], "llama-3.1-8b")
    assert any("max-model-len is not an option of SGLang" in f for f in findings)
    assert any("enable-metrics is not set" in f for f in findings)
