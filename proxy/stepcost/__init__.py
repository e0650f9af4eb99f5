"""The engine's step-cost model: what one vLLM engine step costs, and how often drafts land.

A profile (``EngineProfile``) holds step times on a (batch size, query length) grid, the
draft steps' costs, the prefill cost per prompt token and the acceptance rates by prompt
class; ``StepCostModel`` answers "how long does this step take" from it. The bundled
default is measured on one H200; ``hardware`` derives estimates for other GPUs from it, and
``engines`` each serving engine's profile (vLLM's is the measured one; SGLang's and
TensorRT-LLM's differ where their sources say they do).

Both the simulator (``proxy.sim``, whose engine advances by these steps) and the router's
latency model (``proxy.routing.latency``, which predicts TTFT and TPOT from them) read it,
so neither imports the other.
"""

from proxy.stepcost.engines import ENGINES, EngineName, engine_profile, engine_profile_data
from proxy.stepcost.hardware import (
    GPUS,
    MEASURED,
    GpuSpec,
    derived_profile_data,
    gpu_profile,
    memory_share,
    step_factor,
)
from proxy.stepcost.profile import (
    PROMPT_CLASSES,
    EngineProfile,
    PromptClass,
    SpecMethod,
    SpecShape,
    StepCostModel,
    default_profile,
    default_profile_data,
    load_profile,
)

__all__ = [
    "ENGINES",
    "GPUS",
    "MEASURED",
    "PROMPT_CLASSES",
    "EngineName",
    "EngineProfile",
    "GpuSpec",
    "PromptClass",
    "SpecMethod",
    "SpecShape",
    "StepCostModel",
    "default_profile",
    "default_profile_data",
    "derived_profile_data",
    "engine_profile",
    "engine_profile_data",
    "gpu_profile",
    "load_profile",
    "memory_share",
    "step_factor",
]
