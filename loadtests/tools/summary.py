"""Figures from request records: latency percentiles, throughput, goodput, acceptance, cost.

Everything is reported in model time: wall-clock figures divided by the run's time scale
(durations) or multiplied by it (rates), so a simulated fleet slowed down S times reports
what the modelled GPUs would do. Definitions follow ``vllm bench serve``:

- TTFT: request sent to first token chunk received.
- TPOT: (last token - first token) / (output tokens - 1), per request.
- ITL: time between successive token chunks (one engine step each; with speculation a
  chunk carries several tokens), pooled over requests.
- E2E: request sent to end of stream.
- goodput: requests that finished inside the window and met both SLOs, per second.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from loadtests.tools.loadgen_sse import percentile
from loadtests.tools.prices import GpuPrice, usd_per_million_tokens
from loadtests.tools.streams import RequestRecord


@dataclass(frozen=True, slots=True)
class Slo:
    """Service-level objectives in model-time seconds (TTFT and TPOT, both required)."""

    ttft_s: float = 0.5
    tpot_s: float = 0.025

    def met(self, rec: RequestRecord, scale: float) -> bool:
        if not rec.ok or rec.ttft is None:
            return False
        return not (self.late_ttft(rec, scale) or self.slow_tpot(rec, scale))

    def late_ttft(self, rec: RequestRecord, scale: float) -> bool:
        """Its first token came after the objective (False without one)."""
        return rec.ttft is not None and rec.ttft / scale > self.ttft_s

    def slow_tpot(self, rec: RequestRecord, scale: float) -> bool:
        """It decoded slower than the objective (one-token answers have no TPOT)."""
        return rec.tpot is not None and rec.tpot / scale > self.tpot_s

    def describe(self) -> str:
        return f"TTFT <= {self.ttft_s * 1000:g} ms and TPOT <= {self.tpot_s * 1000:g} ms"


def pcts(values: Sequence[float], scale: float = 1.0) -> dict[str, float | None]:
    """p50/p90/p99 in milliseconds of model time."""
    out: dict[str, float | None] = {}
    for q in (50, 90, 99):
        v = percentile(list(values), q)
        out[f"p{q}"] = None if v is None else v / scale * 1000
    return out


def tokens_in_window(rec: RequestRecord, begin: float, end: float) -> float:
    """Output tokens this request delivered inside [begin, end), assuming even pacing."""
    if not rec.ok or rec.first is None or rec.end is None:
        return 0.0
    first, last = rec.first, rec.end
    if last <= first:
        return float(rec.tokens) if begin <= first < end else 0.0
    overlap = max(0.0, min(last, end) - max(first, begin))
    return rec.tokens * overlap / (last - first)


def summarize(
    records: Iterable[RequestRecord],
    window: tuple[float, float],
    scale: float,
    slo: Slo,
    price: GpuPrice | None = None,
    gpus: int = 1,
) -> dict[str, Any]:
    """Per-class and overall figures for requests that *ended* inside ``window`` (wall s).

    Rates divide by the window's length; latency percentiles pool those requests.
    """
    begin, end = window
    length = (end - begin) / scale
    records = list(records)
    chosen = [r for r in records if _ended_in(r, window) or _failed(r, window)]
    out: dict[str, Any] = {"window_s": length}
    out["overall"] = _group(chosen, records, window, scale, slo, price, gpus)
    out["classes"] = {
        c: _group(
            [r for r in chosen if r.label == c],
            [r for r in records if r.label == c],
            window,
            scale,
            slo,
            None,
            gpus,
        )
        for c in sorted({r.label for r in chosen})
    }
    return out


def _ended_in(rec: RequestRecord, window: tuple[float, float]) -> bool:
    return rec.end is not None and window[0] <= rec.end < window[1]


def _failed(rec: RequestRecord, window: tuple[float, float]) -> bool:
    return rec.end is None and rec.error is not None and window[0] <= rec.start < window[1]


def _group(
    chosen: list[RequestRecord],
    everything: list[RequestRecord],
    window: tuple[float, float],
    scale: float,
    slo: Slo,
    price: GpuPrice | None,
    gpus: int,
) -> dict[str, Any]:
    """Latencies of ``chosen``; tokens any of ``everything`` delivered inside the window."""
    length = (window[1] - window[0]) / scale
    ok = [r for r in chosen if r.ok]
    good = [r for r in ok if slo.met(r, scale)]
    tokens = sum(tokens_in_window(r, *window) for r in everything)
    tok_s = tokens / length if length > 0 else 0.0
    itl = [gap for r in ok for gap in r.itl]
    kinds = Counter((r.error or f"HTTP {r.status}")[:80] for r in chosen if not r.ok)
    group: dict[str, Any] = {
        "requests": len(chosen),
        "ok": len(ok),
        "errors": len(chosen) - len(ok),
        "good": len(good),
        "slo_attainment": len(good) / len(ok) if ok else None,
        "goodput_rps": len(good) / length if length > 0 else 0.0,
        "throughput_rps": len(ok) / length if length > 0 else 0.0,
        "output_tokens_per_s": tok_s,
        "ttft_ms": pcts([r.ttft for r in ok if r.ttft is not None], scale),
        "tpot_ms": pcts([t for r in ok if (t := r.tpot) is not None], scale),
        "itl_ms": pcts(itl, scale),
        "e2e_ms": pcts([r.latency for r in ok if r.latency is not None], scale),
        "acceptance": response_acceptance(ok),
        "tokens_per_chunk": sum(r.tokens for r in ok) / max(1, sum(r.chunks for r in ok)),
        "error_kinds": dict(kinds.most_common(5)),
    }
    if price is not None:
        group["usd_per_m_output_tokens"] = usd_per_million_tokens(tok_s, gpus, price.usd_per_hour)
    return group


def response_acceptance(records: Iterable[RequestRecord]) -> float | None:
    """Draft acceptance from the responses' speculative-decoding summaries: accepted over
    drafted tokens, pooled over the requests (not a mean of per-request rates)."""
    with_drafts = [r for r in records if r.ok and r.drafted]
    drafted = sum(r.drafted or 0.0 for r in with_drafts)
    accepted = sum(r.accepted or 0.0 for r in with_drafts)
    return accepted / drafted if drafted else None


def metrics_acceptance(before: dict[str, float], after: dict[str, float]) -> float | None:
    """Draft acceptance over a run from ``vllm:spec_decode_*_total`` counter deltas."""
    drafted = after.get("vllm:spec_decode_num_draft_tokens_total", 0.0) - before.get(
        "vllm:spec_decode_num_draft_tokens_total", 0.0
    )
    accepted = after.get("vllm:spec_decode_num_accepted_tokens_total", 0.0) - before.get(
        "vllm:spec_decode_num_accepted_tokens_total", 0.0
    )
    return accepted / drafted if drafted > 0 else None


def fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)
