"""The admin API: fleet state, policy reload/rollback, routing explanations.

Guarded by a bearer token (``SPECROUTE_ADMIN_TOKEN``); without one configured, only
loopback clients are let in, so a default install is not open to the network.
"""

from __future__ import annotations

import difflib
import hmac
from typing import Any

from fastapi import APIRouter, Depends, Request

from proxy.errors import GatewayError
from proxy.gateway.handler import Gateway
from proxy.gateway.request import parse_request, requested_max_tokens
from proxy.gateway.responses import OrjsonResponse
from proxy.policy import PolicyError
from proxy.policy.manager import PolicyManager
from proxy.records import Endpoint, RequestInfo

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
    client = request.client.host if request.client else ""
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


def _with_lines(gw: Gateway, row: dict[str, object]) -> dict[str, object]:
    """A pool's break-even row plus the fitted TPOT lines and the pool's current load."""
    pool = str(row["pool"])
    estimate = gw.break_even.estimate(pool)
    loads = [b.inflight for b in gw.fleet.backends.values() if b.spec.pool == pool and b.healthy]
    return {
        **row,
        # TPOT (seconds) = intercept + slope * per-backend concurrency.
        "spec_line": _line(estimate.spec_line),
        "plain_line": _line(estimate.plain_line),
        "concurrency": max(loads, default=0),
    }


def admin_router() -> APIRouter:
    router = APIRouter(prefix="/admin", dependencies=[Depends(require_admin)])

    def gateway(request: Request) -> Gateway:
        gw: Gateway = request.app.state.gateway
        return gw

    def manager(request: Request) -> PolicyManager:
        pm: PolicyManager = request.app.state.policy_manager
        return pm

    @router.get("/fleet")
    async def fleet(request: Request) -> OrjsonResponse:
        return OrjsonResponse(gateway(request).snapshot())

    @router.get("/break-even")
    async def break_even(request: Request) -> OrjsonResponse:
        gw = gateway(request)
        return OrjsonResponse({"pools": [_with_lines(gw, row) for row in gw.break_even.snapshot()]})

    @router.get("/policy")
    async def get_policy(request: Request) -> OrjsonResponse:
        pm = manager(request)
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
            return _dry_run(manager(request), text)
        try:
            version = await manager(request).load_text(text, "PUT /admin/policy")
        except PolicyError as exc:
            request.app.state.gateway.metrics.policy_reloads.labels("refused").inc()
            return _policy_error(exc)
        request.app.state.gateway.metrics.policy_reloads.labels("applied").inc()
        return OrjsonResponse({"digest": version.digest, "source": version.source})

    @router.post("/policy/rollback")
    async def rollback(request: Request) -> OrjsonResponse:
        try:
            version = await manager(request).rollback()
        except PolicyError as exc:
            return _policy_error(exc)
        return OrjsonResponse({"digest": version.digest, "source": version.source})

    @router.get("/shadow")
    async def shadow_summary(request: Request) -> OrjsonResponse:
        return OrjsonResponse(await request.app.state.shadow.summary())

    @router.get("/shadow/mismatches")
    async def shadow_mismatches(request: Request, limit: int = 50) -> OrjsonResponse:
        entries = await request.app.state.gateway.store.recent("shadow", 2000)
        rows = [e.record for e in entries if e.record.get("outcome") != "match"][: max(limit, 0)]
        return OrjsonResponse({"mismatches": rows})

    @router.post("/quarantine/{backend}")
    async def quarantine(request: Request, backend: str) -> OrjsonResponse:
        gw = gateway(request)
        if gw.fleet.get(backend) is None:
            raise GatewayError(404, f"no backend named {backend!r}", param="backend")
        await request.app.state.shadow.set_quarantine(backend, "quarantined by an operator")
        return OrjsonResponse({"backend": backend, "quarantined": True})

    @router.delete("/quarantine/{backend}")
    async def release(request: Request, backend: str) -> OrjsonResponse:
        gw = gateway(request)
        if gw.fleet.get(backend) is None:
            raise GatewayError(404, f"no backend named {backend!r}", param="backend")
        await request.app.state.shadow.set_quarantine(backend, None)
        return OrjsonResponse({"backend": backend, "quarantined": False})

    @router.get("/canary")
    async def canary_state(request: Request) -> OrjsonResponse:
        canary = request.app.state.canary
        history = [e.record for e in await gateway(request).store.recent("canary:audit", 100)]
        return OrjsonResponse({**canary.snapshot(), "history": history})

    @router.post("/canary/{action}")
    async def canary_action(request: Request, action: str) -> OrjsonResponse:
        if action not in ("pause", "resume", "promote", "rollback"):
            raise GatewayError(404, f"unknown canary action {action!r}", param="action")
        try:
            return OrjsonResponse(await request.app.state.canary.command(action))
        except ValueError as exc:
            raise GatewayError(409, str(exc), code="canary_conflict") from exc

    @router.post("/explain")
    async def explain(request: Request) -> OrjsonResponse:
        """Route a request body without sending it anywhere; show every score."""
        gw = gateway(request)
        raw = await request.body()
        asked = request.query_params.get("kind") or (
            "completions" if b'"prompt"' in raw and b'"messages"' not in raw else "chat"
        )
        try:
            kind = Endpoint(asked)
        except ValueError:
            raise GatewayError(400, "kind must be 'chat' or 'completions'", param="kind") from None
        parsed = parse_request(kind, raw)
        label = gw.classify(parsed, request.headers.get("x-specroute-class"))
        info = RequestInfo(
            parsed.model,
            label.label,
            parsed.greedy,
            request.headers.get("x-specroute-session"),
            prompt_bytes=len(raw),
            max_tokens=requested_max_tokens(parsed.body),
        )
        decision = gw.scheduler.schedule(info, explain=True)
        explained = gw.scheduler.explain(decision)
        # The latency model's view of every candidate, whichever scorers the policy uses.
        for row in explained["candidates"]:
            backend = gw.fleet.backends[row["backend"]]
            p = gw.latency.predict(backend, info)
            row["predicted"] = {
                "ttft_ms": round(p.ttft_s * 1000, 3),
                "tpot_ms": round(p.tpot_s * 1000, 3),
                "why": p.describe(),
            }
        result: dict[str, Any] = {
            "kind": kind,
            "model": parsed.model,
            "classification": {
                "label": label.label,
                "reason": label.reason,
                "features": label.features,
                "overridden": label.overridden,
            },
            "expected_output_tokens": gw.latency.output_tokens(label.label, info.max_tokens),
            **explained,
        }
        return OrjsonResponse(result)

    return router
