"""A vLLM launch config: the YAML file ``vllm serve --config FILE`` reads, as the check sees it.

vLLM turns each top-level key into ``--key value`` (underscores and dashes alike), nested
mappings into JSON; only what the cross-check needs is read here, the full parse is vLLM's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml


class LaunchConfigError(ValueError):
    """A launch config that cannot be read."""


@dataclass(frozen=True, slots=True)
class SpeculativeLaunch:
    """The engine's ``speculative-config``."""

    method: str | None
    model: str | None
    num_speculative_tokens: int | None
    draft_tensor_parallel_size: int | None
    heterogeneous_vocab: bool


@dataclass(frozen=True, slots=True)
class LaunchConfig:
    path: Path
    model: str | None
    served_model_names: tuple[str, ...]
    tensor_parallel_size: int
    per_request_metrics: str
    speculative: SpeculativeLaunch | None

    def served_as(self) -> tuple[str, ...]:
        """The names clients may ask for: ``served-model-name``, else the model itself."""
        if self.served_model_names:
            return self.served_model_names
        return (self.model,) if self.model else ()


def _normalised(raw: dict[Any, Any]) -> dict[str, Any]:
    # vLLM accepts --max_model_len and --max-model-len alike.
    return {str(key).replace("_", "-"): value for key, value in raw.items()}


def _speculative(raw: Any, path: Path) -> SpeculativeLaunch | None:
    if raw is None:
        return None
    if isinstance(raw, str):
        try:
            raw = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise LaunchConfigError(f"{path}: speculative-config is not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise LaunchConfigError(f"{path}: speculative-config must be a mapping")
    return SpeculativeLaunch(
        method=None if raw.get("method") is None else str(raw["method"]),
        model=None if raw.get("model") is None else str(raw["model"]),
        num_speculative_tokens=_optional_int(raw, "num_speculative_tokens", path),
        draft_tensor_parallel_size=_optional_int(raw, "draft_tensor_parallel_size", path),
        heterogeneous_vocab=bool(raw.get("use_heterogeneous_vocab", False)),
    )


def _optional_int(raw: dict[str, Any], key: str, path: Path) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise LaunchConfigError(f"{path}: {key} must be a whole number, not {value!r}")
    try:
        return int(value)
    except ValueError as exc:
        raise LaunchConfigError(f"{path}: {key} must be a whole number, not {value!r}") from exc


def load_launch_config(path: Path) -> LaunchConfig:
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise LaunchConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise LaunchConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise LaunchConfigError(f"{path}: a launch config is a mapping of vllm serve options")
    opts = _normalised(raw)
    served = opts.get("served-model-name") or ()
    names = (served,) if isinstance(served, str) else tuple(str(n) for n in served)
    tp = _optional_int(opts, "tensor-parallel-size", path) or 1
    return LaunchConfig(
        path=path,
        model=None if opts.get("model") is None else str(opts["model"]),
        served_model_names=names,
        tensor_parallel_size=tp,
        per_request_metrics=str(opts.get("per-request-spec-decode-metrics", "none")),
        speculative=_speculative(opts.get("speculative-config"), path),
    )
