"""``specroute check``: a policy cross-checked with its engines' launch configs, offline.

vLLM (``vllm serve --config``), SGLang (``sglang serve --config``) and TensorRT-LLM
(``trtllm-serve --extra_llm_api_options``) files, read as each engine reads them.
"""

from proxy.check.deployment import CheckReport, Finding, check_deployment
from proxy.check.launch import (
    Issue,
    LaunchConfig,
    LaunchConfigError,
    SpeculativeLaunch,
)
from proxy.check.models import ModelFacts, ModelResolver, read_model
from proxy.check.readers import LAUNCH_READERS, load_launch_config

__all__ = [
    "LAUNCH_READERS",
    "CheckReport",
    "Finding",
    "Issue",
    "LaunchConfig",
    "LaunchConfigError",
    "ModelFacts",
    "ModelResolver",
    "SpeculativeLaunch",
    "check_deployment",
    "load_launch_config",
    "read_model",
]
