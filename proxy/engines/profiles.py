"""What differs per engine, as one record each: where its metrics and a cheap health probe
live, how its metrics read, whether its errors need rewriting, which request extensions it
takes, how its responses report each request's speculation. Chosen once per backend from the
policy's ``engine`` field."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from proxy.engines.base import MetricsParser
from proxy.engines.errors import openai_error
from proxy.engines.facts import BackendFacts, RequestFacts, SglangFacts, TrtllmFacts
from proxy.engines.sglang import SglangMetrics
from proxy.engines.trtllm import TRTLLM_METRICS
from proxy.engines.vllm import VLLM_METRICS
from proxy.policy.schema import EngineName


@dataclass(frozen=True, slots=True)
class EngineProfile:
    """``health_path`` answers without running the model (the metrics path itself: one
    request does both). ``openai_errors``: the engine's
    error bodies are in OpenAI's shape already. ``continues_chat``: it takes vLLM's
    ``continue_final_message``, which a resumed chat stream needs on the backend that
    continues it. ``facts``: how its responses report each request's speculation
    (``proxy/engines/facts.py``); ``None`` for vLLM, whose summary rides on the usage event
    the relay reads anyway."""

    name: EngineName
    metrics_path: str
    health_path: str
    metrics: MetricsParser
    openai_errors: bool
    continues_chat: bool
    facts: RequestFacts | None = None


PROFILES: Mapping[str, EngineProfile] = MappingProxyType(
    {
        "vllm": EngineProfile(
            name="vllm",
            metrics_path="/metrics",
            health_path="/health",
            metrics=VLLM_METRICS,
            openai_errors=True,
            continues_chat=True,
        ),
        # SGLang's /health runs a one-token generation (``health_generate`` serves both
        # routes in python/sglang/srt/entrypoints/http_server.py unless
        # SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION is off): every probe would queue behind
        # the batch and take a slot. Its /metrics is answered by the HTTP server alone and,
        # like /health, is left open under --api-key (``add_api_key_middleware`` passes
        # paths starting /health or /metrics, as read in a copy of python/sglang/srt/utils.py
        # whose commit could not be pinned), so the metrics read is the probe.
        # ``continue_final_message`` is a ChatCompletionRequest field of SGLang's protocol.py.
        "sglang": EngineProfile(
            name="sglang",
            metrics_path="/metrics",
            health_path="/metrics",
            metrics=SglangMetrics(),
            openai_errors=False,
            continues_chat=True,
            facts=SglangFacts(),
        ),
        # trtllm-serve's /health asks the executor's own health check (no generation;
        # /health_generate is the generating one). Its request models forbid unknown
        # fields (``OpenAIBaseModel``: ``extra="forbid"``) and have no
        # ``continue_final_message``: a chat stream cannot be continued there.
        "trtllm": EngineProfile(
            name="trtllm",
            metrics_path="/prometheus/metrics",
            health_path="/health",
            metrics=TRTLLM_METRICS,
            openai_errors=False,
            continues_chat=False,
            facts=TrtllmFacts(),
        ),
    }
)


def engine_profile(engine: str) -> EngineProfile:
    return PROFILES[engine]


def request_facts(engine: str, k: int) -> BackendFacts | None:
    """How a backend drafting ``k`` tokens per step reports each request's speculation,
    where its engine needs more than the usage event (``None``: a plain backend, or vLLM)."""
    facts = PROFILES[engine].facts
    return BackendFacts(facts, k) if facts is not None and k > 0 else None


def relayed_error(engine: str, status: int, body: bytes) -> bytes:
    """An engine's error body as the client gets it: in OpenAI's shape."""
    return body if PROFILES[engine].openai_errors else openai_error(status, body)
