"""An engine's launch config as the check sees it, whichever engine reads the file.

Each engine has its own file format (``vllm serve --config``, ``sglang serve --config``,
``trtllm-serve --extra_llm_api_options``) and one reader (``vllm_launch``,
``sglang_launch``, ``trtllm_launch``) that turns it into this record: the facts the
cross-check with the policy needs, in the policy's words, and the issues the engine's own
parser or schema would raise on the file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from proxy.policy.schema import EngineName

Level = Literal["error", "warning"]


class LaunchConfigError(ValueError):
    """A launch config that cannot be read."""


@dataclass(frozen=True, slots=True)
class Issue:
    """What the engine would refuse (error) or quietly do otherwise (warning)."""

    level: Level
    message: str


@dataclass(frozen=True, slots=True)
class SpeculativeLaunch:
    """The engine's speculative decoding settings."""

    method: str | None
    """In the policy's words (``speculation.method``); None when the policy has none."""
    engine_method: str | None
    """As the engine spells it (``eagle3``, ``EAGLE3``, ``Eagle``); None when left unset."""
    model: str | None
    """The draft checkpoint, if the method has one."""
    k: int | None
    """Draft tokens per step, the policy's ``k``; None when the engine would choose."""
    k_source: str
    """Where ``k`` comes from, in the engine's terms, for messages."""
    draft_tensor_parallel_size: int | None = None
    heterogeneous_vocab: bool = False


@dataclass(frozen=True, slots=True)
class LaunchConfig:
    path: Path
    engine: EngineName
    model: str | None
    served_model_names: tuple[str, ...]
    tensor_parallel_size: int
    port: int | None
    """The port the file writes (the command line may override it); None when it writes none."""
    speculative: SpeculativeLaunch | None
    issues: tuple[Issue, ...] = ()

    def served_as(self) -> tuple[str, ...]:
        """The names clients may ask for: ``served-model-name``, else the model itself."""
        if self.served_model_names:
            return self.served_model_names
        return (self.model,) if self.model else ()


LaunchReader = Callable[[Path], LaunchConfig]


def read_mapping(path: Path, what: str) -> dict[str, Any]:
    """The YAML mapping at ``path``; ``what`` names the file's kind in the error."""
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise LaunchConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise LaunchConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise LaunchConfigError(f"{path}: a launch config is a mapping of {what}")
    return {str(key): value for key, value in raw.items()}


def optional_int(raw: Mapping[str, Any], key: str, path: Path) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise LaunchConfigError(f"{path}: {key} must be a whole number, not {value!r}")
    try:
        return int(value)
    except ValueError as exc:
        raise LaunchConfigError(f"{path}: {key} must be a whole number, not {value!r}") from exc


def optional_str(raw: Mapping[str, Any], *keys: str) -> str | None:
    """The first of ``keys`` set in ``raw`` (an option and its aliases), as text."""
    for key in keys:
        if raw.get(key) is not None:
            return str(raw[key])
    return None
