"""What ``specroute serve`` tells a person at start: where it listens, what it serves, where
the console, metrics and admin API are, and a first request to try."""

from __future__ import annotations

import logging
import shlex
import sys

import orjson
from fastapi import FastAPI

from proxy.policy import Policy
from proxy.settings import Settings

log = logging.getLogger("specroute")


def _speculation(method: str, k: int) -> str:
    return "no speculation" if method == "none" else f"{method} k={k}"


def _break_even(policy: Policy) -> str:
    pools = sorted({b.pool for b in policy.backends if b.speculation.enabled})
    parts = []
    for pool in pools:
        be = policy.pool_spec(pool).break_even
        parts.append(f"{pool} {be.concurrency:g} ({be.mode})")
    return ", ".join(parts) or "no speculative pool"


def banner(settings: Settings, policy: Policy, source: str) -> str:
    base = f"http://{settings.host}:{settings.port}"
    width = max(len(b.name) for b in policy.backends)
    pool_width = max(len(b.pool) for b in policy.backends)
    lines = [f"specroute serving on {base}  ({source})", ""]
    lines.append(f"  model       {', '.join(policy.models())}")
    for i, b in enumerate(policy.backends):
        head = "  backends    " if i == 0 else " " * 14
        spec = _speculation(b.speculation.method, b.speculation.k)
        lines.append(f"{head}{b.name:<{width}}  pool {b.pool:<{pool_width}}  {spec:<16} {b.url}")
    lines.append(f"  break-even  {_break_even(policy)}")
    shadow = policy.shadow
    sampled = f"reference pool {shadow.reference_pool}, {shadow.rate:.0%} of greedy requests"
    lines.append(f"  shadow      {sampled if shadow.reference_pool else 'off'}")
    lines.append(f"  canary      {policy.canary.name if policy.canary else 'none'}")
    admin = (
        "bearer SPECROUTE_ADMIN_TOKEN (console sign-in at /ui/login)"
        if settings.admin_token
        else "loopback clients only until SPECROUTE_ADMIN_TOKEN is set"
    )
    body = orjson.dumps(
        {"model": policy.models()[0], "messages": [{"role": "user", "content": "Hello!"}]}
    ).decode()
    lines += [
        "",
        f"  console     {base}/ui",
        f"  metrics     {base}/metrics",
        f"  admin API   {base}/admin/fleet  ({admin})",
        f"  OpenAI API  {base}/v1  (any api_key)",
        "",
        "  try:",
        f"    curl -si {base}/v1/chat/completions -H 'content-type: application/json' \\",
        f"      -d {shlex.quote(body)}",
        "",
    ]
    return "\n".join(lines)


async def announce(app: FastAPI) -> None:
    """A start-up hook: one banner (text logs) or one structured record (JSON logs)."""
    settings: Settings = app.state.settings
    current = app.state.policy_manager.current
    if settings.log_format == "json":
        log.info(
            "serving",
            extra={
                "url": f"http://{settings.host}:{settings.port}",
                "policy_source": current.source,
                "models": current.policy.models(),
                "backends": [
                    {"name": b.name, "pool": b.pool, "url": b.url, "method": b.speculation.method}
                    for b in current.policy.backends
                ],
                "console": "/ui",
                "metrics": "/metrics",
                "admin": "/admin",
            },
        )
        return
    sys.stderr.write("\n" + banner(settings, current.policy, current.source) + "\n")
    sys.stderr.flush()
