"""The admin API: fleet state, policy reload/rollback, routing explanations.

Guarded by a bearer token (``SPECROUTE_ADMIN_TOKEN``); without one configured, only
loopback clients are let in, so a default install is not open to the network.
"""

from __future__ import annotations

import difflib
import hmac
import time
from typing import Any

from fastapi import APIRouter, Depends, Request

from proxy.errors import GatewayError
from proxy.gateway.admin_sizes import process_sizes, structure_sizes
from proxy.gateway.api import runtime_of
from proxy.gateway.clientaddr import client_host
from proxy.gateway.handler import Gateway
from proxy.gateway.request import parse_request, requested_output_tokens
from proxy.gateway.responses import OrjsonResponse
from proxy.gateway.runtime import Runtime
from proxy.policy import PolicyError
from proxy.policy.manager import PolicyManager
from proxy.records import Endpoint, RequestInfo
from proxy.routing.cached_share import CachedShareAcceptance
from proxy.routing.prefix import prompt_chunks
from proxy.verify.canary import AUDIT_LOG, CanaryController
from proxy.verify.shadow import SHADOW_LOG, ShadowVerifier

LOOPBACK = {"127.0.0.1", "::1", "localhost"}
# The console's sign-in form stores the token here (browsers cannot send a bearer header).
ADMIN_COOKIE = "specroute_admin"


def require_admin(request: Request) -> None:
    token: str | None = request.app.state.settings.admin_token
    if token:
        given = request.headers.get("authorization", "")
        if not given and (cookie := request.cookies.get(ADMIN_COOKIE)):
            given = f"Bearer {cookie}"
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            raise GatewayError(401, "admin token missing or wrong", code="invalid_admin_token")
        return
    client = client_host(request.scope, request.app.state.trusted_proxies) or ""
    if client not in LOOPBACK:
        raise GatewayError(
            403,
            "admin API is loopback-only until SPECROUTE_ADMIN_TOKEN is set",
            code="admin_forbidden",
        )


def _policy_error(exc: PolicyError) -> OrjsonResponse:
    body = GatewayError(400, str(exc), code="invalid_policy").payload()
    body["error"]["problems"] = exc.problems  # type: ignore[assignment]
    return OrjsonResponse(body, status_code=400)


def _dry_run(pm: PolicyManager, text: str) -> OrjsonResponse:
    """Validate without applying; the diff is against the policy in force."""
    try:
        version = pm.check(text, "PUT /admin/policy?dry_run=1")
    except PolicyError as exc:
        return _policy_error(exc)
    diff = difflib.unified_diff(
        pm.current.text.splitlines(keepends=True),
        text.splitlines(keepends=True),
        f"active ({pm.current.digest})",
        f"proposed ({version.digest})",
    )
    return OrjsonResponse(
        {
            "dry_run": True,
            "digest": version.digest,
            "unchanged": version.digest == pm.current.digest,
            "diff": "".join(diff),
        }
    )


def _line(fit: tuple[float, float] | None) -> dict[str, float] | None:
    return None if fit is None else {"intercept": fit[0], "slope": fit[1]}


def _with_lines(runtime: Runtime, row: dict[str, object]) -> dict[str, object]:
    """A pool's break-even row plus the fitted TPOT lines and the pool's current load."""
    pool = str(row["pool"])
    estimate = runtime.break_even.estimate(pool)
    backends = runtime.fleet.backends.values()
    loads = [b.inflight for b in backends if b.spec.pool == pool and b.healthy]
    return {
        **row,
        # TPOT (seconds) = intercept + slope * per-backend concurrency.
        "spec_line": _line(estimate.spec_line),
        "plain_line": _line(estimate.plain_line),
        "concurrency": max(loads, default=0),
    }


def _acceptance_by_backend(acceptance: list[dict[str, object]]) -> dict[str, dict[str, Any]]:
    """The tracker's rows (``acceptance``) as each backend's, by prompt class."""
    found: dict[str, dict[str, Any]] = {}
    for row in acceptance:
        by_class = found.setdefault(str(row["backend"]), {})
        by_class[str(row["class"])] = {
            "rate": row["rate"],
            "samples": row["samples"],
            "below_floor": row["below_floor"],
        }
    return found


def fleet_snapshot(runtime: Runtime) -> dict[str, Any]:
    """The fleet as the admin API shows it. Each backend's row says which engine it runs,
    its load (in flight here, and running, waiting and KV cache use as its engine's own
    metrics report them) and its acceptance two ways: ``window_acceptance`` from the
    engine's counters over the last scrape interval, and ``acceptance_by_class`` as the
    scheduler uses it, learnt per request from the responses (the engine's own per-request
    figures where it reports them: ``proxy/engines/facts.py``)."""
    at = time.monotonic()
    prefix = runtime.scheduler.prefix
    acceptance = runtime.acceptance.snapshot()
    by_backend = _acceptance_by_backend(acceptance)
    return {
        "backends": [
            {
                "name": b.name,
                "url": b.spec.url,
                "model": b.spec.model,
                "pool": b.spec.pool,
                "engine": b.spec.engine,
                "speculation": b.spec.speculation.model_dump(),
                "draft_version": b.spec.draft_version,
                "healthy": b.healthy,
                "last_error": b.last_error,
                "inflight": b.inflight,
                "local_inflight": b.local_inflight,
                "prefill_pending": b.prefill_pending,
                "running": b.running,
                "waiting": b.waiting,
                "kv_usage": b.kv_usage,
                "window_acceptance": b.window_acceptance,
                "acceptance_by_class": by_backend.get(b.name, {}),
                "prefix_cache": {"hits": b.prefix_cache_hits, "queries": b.prefix_cache_queries},
                "quarantined": b.quarantined,
                "outlier": {
                    "consecutive_failures": b.passive_failures,
                    "ejections": b.ejections,
                    "ejections_suppressed": b.ejections_suppressed,
                    "ejected_for_s": round(max(b.ejected_until - at, 0.0), 3),
                    "overloads": b.overloads,
                    "backing_off_for_s": round(max(b.overloaded_until - at, 0.0), 3),
                },
            }
            for b in runtime.fleet.backends.values()
        ],
        "break_even": runtime.break_even.snapshot(),
        "acceptance": acceptance,
        "prefix_index": None if prefix is None else prefix.snapshot(),
    }


def _manager(request: Request) -> PolicyManager:
    manager: PolicyManager = request.app.state.policy_manager
    return manager


def _shadow(request: Request) -> ShadowVerifier:
    shadow: ShadowVerifier = request.app.state.shadow
    return shadow


def _canary(request: Request) -> CanaryController:
    canary: CanaryController = request.app.state.canary
    return canary


def admin_router() -> APIRouter:
    router = APIRouter(prefix="/admin", dependencies=[Depends(require_admin)])

    @router.get("/fleet")
    async def fleet(request: Request) -> OrjsonResponse:
        snapshot = fleet_snapshot(runtime_of(request))
        # The admission queue: this replica's (each holds its own).
        gateway: Gateway = request.app.state.gateway
        snapshot["queue"] = gateway.dispatch.queue.snapshot()
        return OrjsonResponse(snapshot)

    @router.get("/sizes")
    async def sizes(request: Request) -> OrjsonResponse:
        """The length of every container the replica holds, by path (read-only; a soak
        samples it to find what grows), and the event loop's task count."""
        found = structure_sizes(request.app.state)
        return OrjsonResponse(
            {**process_sizes(), "structures": found.sizes, "bounds": found.bounds}
        )

    @router.get("/acceptance")
    async def acceptance(request: Request) -> OrjsonResponse:
        # Per backend and prompt class (the routing's windows), and per pool by the share
        # of the prompt the engine had cached (a silent prefix-cache interaction shows here).
        by_share: CachedShareAcceptance = request.app.state.cached_share
        return OrjsonResponse(
            {
                "by_class": runtime_of(request).acceptance.snapshot(),
                "by_cached_share": by_share.snapshot(),
            }
        )

    @router.get("/break-even")
    async def break_even(request: Request) -> OrjsonResponse:
        runtime = runtime_of(request)
        pools = [_with_lines(runtime, row) for row in runtime.break_even.snapshot()]
        return OrjsonResponse({"pools": pools})

    @router.get("/policy")
    async def get_policy(request: Request) -> OrjsonResponse:
        pm = _manager(request)
        return OrjsonResponse(
            {
                "digest": pm.current.digest,
                "source": pm.current.source,
                "text": pm.current.text,
                "history": [{"digest": v.digest, "source": v.source} for v in reversed(pm.history)],
            }
        )

    @router.put("/policy")
    async def put_policy(request: Request) -> OrjsonResponse:
        text = (await request.body()).decode("utf-8", "replace")
        if request.query_params.get("dry_run") in ("1", "true"):
            return _dry_run(_manager(request), text)
        try:
            version = await _manager(request).load_text(text, "PUT /admin/policy")
        except PolicyError as exc:
            runtime_of(request).metrics.policy_reloads.labels("refused").inc()
            return _policy_error(exc)
        runtime_of(request).metrics.policy_reloads.labels("applied").inc()
        return OrjsonResponse({"digest": version.digest, "source": version.source})

    @router.post("/policy/rollback")
    async def rollback(request: Request) -> OrjsonResponse:
        try:
            version = await _manager(request).rollback()
        except PolicyError as exc:
            return _policy_error(exc)
        return OrjsonResponse({"digest": version.digest, "source": version.source})

    @router.get("/shadow")
    async def shadow_summary(request: Request) -> OrjsonResponse:
        return OrjsonResponse(await _shadow(request).summary())

    @router.get("/shadow/mismatches")
    async def shadow_mismatches(request: Request, limit: int = 50) -> OrjsonResponse:
        entries = await runtime_of(request).store.recent(SHADOW_LOG, 2000)
        rows = [e.record for e in entries if e.record.get("outcome") != "match"][: max(limit, 0)]
        return OrjsonResponse({"mismatches": rows})

    @router.post("/quarantine/{backend}")
    async def quarantine(request: Request, backend: str) -> OrjsonResponse:
        if runtime_of(request).fleet.get(backend) is None:
            raise GatewayError(404, f"no backend named {backend!r}", param="backend")
        await _shadow(request).set_quarantine(backend, "quarantined by an operator")
        return OrjsonResponse({"backend": backend, "quarantined": True})

    @router.delete("/quarantine/{backend}")
    async def release(request: Request, backend: str) -> OrjsonResponse:
        if runtime_of(request).fleet.get(backend) is None:
            raise GatewayError(404, f"no backend named {backend!r}", param="backend")
        await _shadow(request).set_quarantine(backend, None)
        return OrjsonResponse({"backend": backend, "quarantined": False})

    @router.get("/canary")
    async def canary_state(request: Request) -> OrjsonResponse:
        canary = _canary(request)
        history = [e.record for e in await runtime_of(request).store.recent(AUDIT_LOG, 100)]
        return OrjsonResponse({**canary.snapshot(), "history": history})

    @router.post("/canary/{action}")
    async def canary_action(request: Request, action: str) -> OrjsonResponse:
        if action not in ("pause", "resume", "promote", "rollback"):
            raise GatewayError(404, f"unknown canary action {action!r}", param="action")
        try:
            return OrjsonResponse(await _canary(request).command(action))
        except ValueError as exc:
            raise GatewayError(409, str(exc), code="canary_conflict") from exc

    @router.post("/explain")
    async def explain(request: Request) -> OrjsonResponse:
        """Route a request body without sending it anywhere; show every score."""
        runtime = runtime_of(request)
        raw = await request.body()
        asked = request.query_params.get("kind") or (
            "completions" if b'"prompt"' in raw and b'"messages"' not in raw else "chat"
        )
        try:
            kind = Endpoint(asked)
        except ValueError:
            raise GatewayError(400, "kind must be 'chat' or 'completions'", param="kind") from None
        parsed = parse_request(kind, raw)
        classification = runtime.classify(parsed, request.headers.get("x-specroute-class"))
        info = RequestInfo(
            parsed.model,
            classification.label,
            parsed.greedy,
            request.headers.get("x-specroute-session"),
            prompt_bytes=len(raw),
            max_tokens=requested_output_tokens(parsed.body) or None,
            prefix_chunks=prompt_chunks(parsed.body),
            # Whose objective the latency scorer weighs (slo.tenants): the caller's own
            # key is the operator's, so the tenant to explain for is named.
            tenant=request.query_params.get("tenant") or None,
        )
        decision = runtime.scheduler.schedule(info, explain=True)
        explained = runtime.scheduler.explain(decision)
        # The latency model's view of every candidate, whichever scorers the policy uses.
        for row in explained["candidates"]:
            backend = runtime.fleet.backends[row["backend"]]
            p = runtime.latency.predict(
                backend, info, runtime.scheduler.cached_share(decision, backend)
            )
            row["predicted"] = {
                "ttft_ms": round(p.ttft_s * 1000, 3),
                "tpot_ms": round(p.tpot_s * 1000, 3),
                "why": p.describe(),
            }
        objective = runtime.policy.slo.objective(parsed.model, classification.label, info.tenant)
        result: dict[str, Any] = {
            "kind": kind,
            "model": parsed.model,
            "tenant": info.tenant,
            "objective": {"ttft_ms": objective.ttft_ms, "tpot_ms": objective.tpot_ms},
            "classification": {
                "label": classification.label,
                "reason": classification.reason,
                "features": classification.features,
                "overridden": classification.overridden,
            },
            "expected_output_tokens": runtime.latency.output_tokens(
                classification.label, info.max_tokens
            ),
            **explained,
        }
        return OrjsonResponse(result)

    return router
