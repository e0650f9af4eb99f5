"""One access line per relayed request, on the ``specroute.access`` logger.

Off by default (``access_log``): formatting a line costs more than scheduling the request,
and a fleet's request-level record is the traffic log or the tracing pipeline. When on, the
line carries what an operator greps for (request id, tenant, class, backend, why it went
there, status, TTFT, tokens); with ``log_format: json`` the same fields arrive as keys.
"""

from __future__ import annotations

import logging

from proxy.records import Outcome, ParsedRequest, Route

log = logging.getLogger("specroute.access")


class AccessLog:
    """An outcome listener writing the access line of every request it hears of."""

    def on_outcome(self, request: ParsedRequest, outcome: Outcome, route: Route) -> None:
        if not log.isEnabledFor(logging.INFO):
            return
        ttft = outcome.ttft
        fields = {
            "request_id": route.request.request_id,
            "tenant": route.request.tenant,
            "model": request.model,
            "endpoint": request.kind.value,
            "class": outcome.label,
            "backend": outcome.backend,
            "pool": outcome.pool,
            "reason": route.reason.kind.value,
            "status": outcome.status,
            "ttft_ms": None if ttft is None else round(ttft * 1000, 1),
            "prompt_tokens": outcome.prompt_tokens,
            "completion_tokens": outcome.completion_tokens,
            "client_gone": outcome.client_gone,
        }
        log.info(
            "%s %s %s tenant=%s class=%s backend=%s reason=%s status=%s ttft_ms=%s tokens=%s/%s",
            fields["request_id"],
            fields["endpoint"],
            fields["model"],
            fields["tenant"] or "-",
            fields["class"],
            fields["backend"],
            fields["reason"],
            fields["status"],
            fields["ttft_ms"],
            fields["prompt_tokens"],
            fields["completion_tokens"],
            extra={"access": fields},
        )
