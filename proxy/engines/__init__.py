"""The engines a backend may run (vLLM, SGLang, TensorRT-LLM) and what differs between them.

``engine_profile(name)`` gives one engine's :class:`EngineProfile`: its metrics endpoint and
parser (``vllm``/``sglang``/``trtllm`` modules, each reading its engine's names into one
:class:`EngineReading` in vLLM's units), its cheap health probe and its API quirks.
``openai_error`` rewrites an engine's error body into OpenAI's shape (``relayed_error``: where
the engine needs it). ``request_facts`` gives a speculative backend's per-request
speculation facts as its engine reports them (``facts`` module), read into vLLM's units.
"""

from proxy.engines.base import EngineReading, MetricsParser
from proxy.engines.errors import openai_error
from proxy.engines.facts import BackendFacts, RequestFacts
from proxy.engines.profiles import (
    PROFILES,
    EngineProfile,
    engine_profile,
    relayed_error,
    request_facts,
)

__all__ = [
    "PROFILES",
    "BackendFacts",
    "EngineProfile",
    "EngineReading",
    "MetricsParser",
    "RequestFacts",
    "engine_profile",
    "openai_error",
    "relayed_error",
    "request_facts",
]
