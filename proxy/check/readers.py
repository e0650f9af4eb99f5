"""Which reader reads a backend's launch config: the one of the backend's ``engine``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from proxy.check.launch import LaunchConfig, LaunchReader
from proxy.check.sglang_launch import read_sglang_launch
from proxy.check.trtllm_launch import read_trtllm_launch
from proxy.check.vllm_launch import read_vllm_launch
from proxy.policy.schema import EngineName

LAUNCH_READERS: Mapping[EngineName, LaunchReader] = MappingProxyType(
    {"vllm": read_vllm_launch, "sglang": read_sglang_launch, "trtllm": read_trtllm_launch}
)


def load_launch_config(path: Path, engine: EngineName = "vllm") -> LaunchConfig:
    """``path`` read as ``engine`` reads it; raises LaunchConfigError when unreadable."""
    return LAUNCH_READERS[engine](path)
