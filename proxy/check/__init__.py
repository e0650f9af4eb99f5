"""``specroute check``: a policy cross-checked with its engines' vLLM launch configs, offline."""

from proxy.check.deployment import CheckReport, Finding, check_deployment
from proxy.check.launch import (
    LaunchConfig,
    LaunchConfigError,
    SpeculativeLaunch,
    load_launch_config,
)
from proxy.check.models import ModelFacts, ModelResolver, read_model

__all__ = [
    "CheckReport",
    "Finding",
    "LaunchConfig",
    "LaunchConfigError",
    "ModelFacts",
    "ModelResolver",
    "SpeculativeLaunch",
    "check_deployment",
    "load_launch_config",
    "read_model",
]
