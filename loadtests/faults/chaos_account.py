"""Every request of a chaos run that did not end well, accounted for: in which fault's
window it started, its request ids, what each HTTP try got, what the gateways logged under
those ids, and why it could be neither retried nor resumed.

The client sends ``x-request-id: chaos-<n>-<resend>`` (the SDK keeps it across its own
retries), the gateways write it on every access line and warning, so a failure's story is
read from both sides: the transport's record of each HTTP try (``504@gateway-0``,
``ConnectError``) and the replicas' log lines. The reason is derived from the error the
client got (its status and OpenAI ``code``) with what those lines show, by the rules in
:func:`why`; a failure no rule explains is reported as unexplained (and counted).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from loadtests.faults.chaos_client import Ending, Result

_ID = re.compile(r"chaos-(\d+)-(\d+)(?![\d-])")
_BACKEND = re.compile(r"backend=(\S+)")
LINES_PER_REQUEST = 12


class Span(Protocol):
    name: str
    start: float
    end: float
    lag: dict[str, dict[str, float]]


@dataclass(frozen=True, slots=True)
class Budget:
    """The gateways' first-byte settings, as the reasons quote them."""

    first_byte_timeout_s: float
    first_byte_budget_s: float
    max_attempts: int


def log_lines(texts: Iterable[str], wanted: set[str]) -> dict[str, list[str]]:
    """The gateway log lines that name each wanted request id (``chaos-<n>-<resend>``)."""
    found: dict[str, list[str]] = {}
    for text in texts:
        for line in text.splitlines():
            if "chaos-" not in line:
                continue
            for match in _ID.finditer(line):
                rid = match.group(0)
                if rid in wanted:
                    found.setdefault(rid, []).append(line[-400:])
    return found


def window_of(started: float, windows: Sequence[Span]) -> str:
    span = span_of(started, windows)
    return span.name if span is not None else "after the last window"


def span_of(started: float, windows: Sequence[Span]) -> Span | None:
    for w in windows:
        if w.start <= started < w.end:
            return w
    return None


def host_lag(span: Span | None) -> str:
    """The engines' step overrun in the window, worst first ("" when none was read)."""
    if span is None or not span.lag:
        return ""
    worst = sorted(span.lag.items(), key=lambda kv: -kv[1]["overrun"])
    shown = ", ".join(f"{name} {v['overrun']:+.0%}" for name, v in worst if v["steps"])
    return f"; the engines' steps ran over their modelled time in that window: {shown}"


def why(result: Result, lines: Sequence[str], budget: Budget, span: Span | None = None) -> str:
    """Why a request that ended badly could be neither retried nor resumed."""
    code, detail = result.error_code, result.detail
    tries = [t for each in result.tries.values() for t in each]
    statuses = ", ".join(tries) or "none recorded"
    backends = sorted({m.group(1) for line in lines if (m := _BACKEND.search(line))})
    tried = f"backends tried: {', '.join(backends)}" if backends else "no access line"
    if result.ending is Ending.HUNG:
        return f"hung ({detail}); HTTP tries: {statuses}; {tried}"
    if result.ending is Ending.TRUNCATED:
        return f"truncated ({detail}); HTTP tries: {statuses}"
    if code == "upstream_timeout":
        return (
            f"no first byte from any backend the gateway tried within its first-byte "
            f"timeout ({budget.first_byte_timeout_s:g} s a try, "
            f"{budget.first_byte_budget_s:g} s for all, at most {budget.max_attempts} "
            f"attempts), on each of the client's tries ({statuses}); last: "
            f"{result.error_message or tried}{host_lag(span)}"
        )
    # A 5xx the engine itself sent (through Envoy an engine's error passes as it is, its
    # OpenAI `code` the HTTP status in vLLM's shape).
    engine_code = code is None or str(code).isdigit()
    if code == "upstream_status" or (detail.startswith("HTTP 5") and engine_code):
        return f"every backend tried answered 5xx, passed on as the last one's ({statuses})"
    if code == "picker_unavailable":
        return (
            f"the replica's picker was down (Envoy fails closed: 500) on each of the "
            f"client's tries ({statuses}), before its readiness probe took it out"
        )
    if code == "upstream_error":
        return f"Envoy's own upstream error on each of the client's tries ({statuses}): {result.error_message}"
    if code == "no_healthy_backend":
        return f"no healthy backend left to try ({statuses})"
    if detail.startswith("error event"):
        not_resumed = [line for line in lines if "not resumed" in line]
        reason = "sampled stream (not resumable exactly)" if not not_resumed else "no backend"
        return (
            f"broken after its first byte ({code}); not resumed: "
            f"{not_resumed[-1].split(': ', 1)[-1] if not_resumed else reason}"
        )
    if detail.startswith("connection") or "when sent again" in detail:
        return (
            f"the connection broke (a replica killed under it); sent again once by the "
            f"client: {detail}"
        )
    if detail.startswith("HTTP 429") or detail.startswith("HTTP 503"):
        return f"refused with back-off on every client try ({statuses}; code {code})"
    return f"unexplained: {detail} (code {code}; HTTP tries {statuses})"


def account(
    results: Sequence[Result],
    windows: Sequence[Span],
    logs: Iterable[str],
    budget: Budget,
) -> list[dict[str, Any]]:
    """One row per request that failed, hung or was truncated."""
    bad = [r for r in results if r.ending in (Ending.FAILED, Ending.HUNG, Ending.TRUNCATED)]
    wanted = {f"chaos-{r.index}-{n}" for r in bad for n in (0, 1)}
    lines = log_lines(logs, wanted)
    rows = []
    for r in bad:
        ids = [f"chaos-{r.index}-{n}" for n in range(r.client_retries + 1)]
        mine = [line for rid in ids for line in lines.get(rid, [])]
        rows.append(
            {
                "window": window_of(r.started, windows),
                "request_ids": ids,
                "started_s": round(r.started, 2),
                "ending": r.ending.value,
                "error": r.detail,
                "code": r.error_code,
                "message": r.error_message,
                "http_tries": r.tries,
                "why": why(r, mine, budget, span_of(r.started, windows)),
                "gateway_lines": mine[-LINES_PER_REQUEST:],
            }
        )
    return rows


def reasons(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Failures per (window, reason kind), the reason cut before its particulars."""
    counts: dict[str, int] = {}
    for row in rows:
        kind = str(row["why"]).split(" (", 1)[0].split(";", 1)[0]
        key = f"{row['window']}: {kind}"
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))
