"""Per-request speculation facts in SGLang's and TensorRT-LLM's responses, in vLLM's units.

The gateway's unit is vLLM's per-request summary (``metrics.speculative_decoding`` with
``--per-request-spec-decode-metrics``): drafts proposed (``num_draft_tokens``) and accepted
(``num_accepted_draft_tokens``), which acceptance by prompt class is fed from
(``proxy/routing/observe.py``). vLLM's rides on the usage event and is read there by the
relay (``proxy/gateway/relay.py``), asking nothing of the request: the server's flag turns
it on. The other two engines put theirs elsewhere, and one must be asked:

SGLang (sgl-project/sglang PR #33518, merged 2026-08-04; ``python/sglang/srt/entrypoints/
openai/serving_chat.py``, ``serving_completions.py`` and ``utils.py``
``spec_tokens_details_from_meta_info`` as read after it, the commit not pinned): a chat or
completion request with ``return_spec_tokens_details: true`` gets a response-level
``sglext.spec_tokens_details`` (a list with one entry per choice when ``n > 1``): unary, in
the body; streamed, in its own ``choices: []`` chunk after the last content chunk and before
the usage chunk, sent whether usage was asked for or not. Its counts are the request's
``spec_verify_ct`` (verification steps), ``spec_num_proposed_drafts`` and
``spec_num_correct_drafts`` (accepted drafts, the bonus token left out), with
``spec_correct_drafts_histogram`` (steps by drafts accepted). Any other engine refuses or
ignores the field, so it is asked only of SGLang.

TensorRT-LLM (``tensorrt_llm/serve/postprocess_handlers.py`` at NVIDIA/TensorRT-LLM
7b437aaa73bf): every choice, streamed or not, carries ``avg_decoded_tokens_per_iter``, the
request's generated tokens over its decoding iterations so far (``LlmRequest::
getAvgDecodedTokensPerIter``: 1 for a plain model, "draft tokens accepted per step + 1"
when speculating; the context iteration, which yields the first token, counts). Nothing
is asked (its request models refuse unknown fields). With the completion tokens ``n`` of
usage, the iterations are ``n / avg``, all but the first a verification step, and the
accepted drafts ``n - iterations``; the drafts proposed are the steps times ``k``, the
backend's draft tokens per step (as TensorRT-LLM's own counters count them). Streamed,
the last content chunk carries the final figure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

import orjson

Spec = dict[str, Any]


class RequestFacts(Protocol):
    """One engine's per-request speculation facts. ``ask``: the request fields that make the
    engine report them (empty: none). ``marker``: bytes only a stream event carrying them
    holds. ``read``: them from a unary body or that event, with ``tokens`` the completion
    tokens of usage and ``k`` the backend's draft tokens per step (``None``: none there)."""

    @property
    def ask(self) -> Mapping[str, Any]: ...

    @property
    def marker(self) -> bytes: ...

    def read(self, obj: dict[str, Any], tokens: int | None, k: int) -> Spec | None: ...


def summary(accepted: int, drafted: int, steps: int) -> Spec | None:
    """The facts in vLLM's summary keys (``None`` when nothing was drafted)."""
    if drafted <= 0 or steps <= 0:
        return None
    accepted = min(max(accepted, 0), drafted)
    return {
        "num_draft_tokens": drafted,
        "num_accepted_draft_tokens": accepted,
        "num_spec_steps": steps,
        "draft_acceptance_rate": accepted / drafted,
        "mean_acceptance_length": 1.0 + accepted / steps,
    }


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class SglangFacts:
    """``sglext.spec_tokens_details``, summed over the choices of an ``n > 1`` request."""

    __slots__ = ()

    ask: Mapping[str, Any] = MappingProxyType({"return_spec_tokens_details": True})
    marker: bytes = b'"spec_tokens_details"'

    def read(self, obj: dict[str, Any], tokens: int | None, k: int) -> Spec | None:
        ext = obj.get("sglext")
        found = ext.get("spec_tokens_details") if isinstance(ext, dict) else None
        entries = found if isinstance(found, list) else [found]
        accepted = drafted = steps = 0
        histogram: list[int] = []
        for entry in entries:
            if not isinstance(entry, dict):
                continue
            verify = _count(entry.get("spec_verify_ct"))
            steps += verify
            accepted += _count(entry.get("spec_num_correct_drafts"))
            # Servers from before the proposed count: every step drafts k.
            drafted += _count(entry.get("spec_num_proposed_drafts")) or verify * k
            for j, count in enumerate(entry.get("spec_correct_drafts_histogram") or ()):
                if j == len(histogram):
                    histogram.append(0)
                histogram[j] += _count(count)
        spec = summary(accepted, drafted, steps)
        if spec is not None and histogram:
            spec["acceptance_histogram"] = histogram
        return spec


class TrtllmFacts:
    """``avg_decoded_tokens_per_iter`` of the first choice that carries it."""

    __slots__ = ()

    ask: Mapping[str, Any] = MappingProxyType({})
    marker: bytes = b'"avg_decoded_tokens_per_iter"'

    def read(self, obj: dict[str, Any], tokens: int | None, k: int) -> Spec | None:
        if not tokens or k <= 0:
            return None
        for choice in obj.get("choices") or ():
            average = (
                choice.get("avg_decoded_tokens_per_iter") if isinstance(choice, dict) else None
            )
            if isinstance(average, int | float) and average >= 1.0:
                # A float32 on the engine: the iterations are the nearest whole number.
                iterations = max(round(tokens / average), 1)
                steps = iterations - 1
                return summary(tokens - iterations, steps * k, steps)
        return None


@dataclass(frozen=True, slots=True)
class BackendFacts:
    """One speculative backend's facts: its engine's way of reporting them and its ``k``.
    ``strip``: the event carrying them is taken out of the stream again, the gateway having
    asked for it and the client not (SGLang's ``choices: []`` chunk would otherwise reach
    clients that read ``choices[0]`` of every chunk, as OpenAI only sends such a chunk for
    usage asked for)."""

    facts: RequestFacts
    k: int
    strip: bool = False

    def for_request(self, body: Mapping[str, Any]) -> BackendFacts:
        """These facts for one client request: stripped unless the client asked itself."""
        ask = self.facts.ask
        asked = all(body.get(key) == value for key, value in ask.items())
        return BackendFacts(self.facts, self.k, strip=bool(ask) and not asked)

    @property
    def marker(self) -> bytes:
        return self.facts.marker

    def asked(self, body: bytes) -> bytes:
        """The request body with the fields that make the engine report the facts."""
        ask = self.facts.ask
        if not ask:
            return body
        obj = orjson.loads(body)
        if not isinstance(obj, dict) or all(obj.get(key) == value for key, value in ask.items()):
            return body
        return orjson.dumps({**obj, **ask})

    def read(self, obj: dict[str, Any], tokens: int | None) -> Spec | None:
        return self.facts.read(obj, tokens, self.k)
