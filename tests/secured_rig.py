"""A gateway set up as in production, for the tests that attack it: API keys for two
tenants (and one revoked), an admin token, the access log on, over two simulated engines
fast enough that thousands of fuzzed requests take seconds. Every log record is kept so a
test can look for tracebacks and leaked secrets."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from proxy.gateway.auth import hash_key
from proxy.settings import Settings
from proxy.sim.config import SimConfig
from proxy.sim.server import run_sim_in_thread
from tests.gateway_rig import GatewayHandle, run_gateway, sim_backend, write_policy

MODEL = "sim-llama-8b"
ADMIN_TOKEN = "admin-token-7f3a9c1e5b2d4068"
TENANT_KEY = "sk-tenant-a-5e8d1c0b9a7f6e4d"
OTHER_KEY = "sk-tenant-b-3c2b1a0f9e8d7c6b"
# Listed when the gateway started, then taken out of the keys file (a rotation).
REVOKED_KEY = "sk-revoked-9f8e7d6c5b4a3210"
UNKNOWN_KEY = "sk-never-issued-0a1b2c3d4e5f"
# A tenant with a small per-minute limit, to try to get past it.
LIMITED_KEY = "sk-limited-c-1b2a3c4d5e6f7a8b"
LIMITED_RPM = 3
SECRETS = (ADMIN_TOKEN, TENANT_KEY, OTHER_KEY, REVOKED_KEY, UNKNOWN_KEY, LIMITED_KEY)
# Tenant b may not use the model the fleet serves; tenant a has generous limits.
TENANTS: dict[str, dict[str, object]] = {
    "tenant-a": {"requests_per_minute": 100_000, "concurrent_requests": 64},
    "tenant-b": {"models": ["another-model"], "requests_per_minute": 100_000},
    "tenant-c": {"requests_per_minute": LIMITED_RPM},
}


def write_keys(path: Path, keys: dict[str, str]) -> Path:
    document = {
        "tenants": TENANTS,
        "keys": [{"sha256": hash_key(key), "tenant": tenant} for key, tenant in keys.items()],
    }
    path.write_text(yaml.safe_dump(document))
    return path


def fast_sim(seed: int) -> SimConfig:
    """The default engine at a thousandth of its step cost and short answers."""
    profile = SimConfig().profile
    fast = profile.model_copy(
        update={
            "step_ms": [[cost / 1000 for cost in row] for row in profile.step_ms],
            "prefill_ms_per_token": 0.0,
            "output_tokens": (1, 8),
        }
    )
    return SimConfig(seed=seed, profile=fast)


class Records(logging.Handler):
    """Every record of every logger, formatted as it would be written (tracebacks too)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def text(self) -> str:
        return "\n".join(self.format(r) for r in list(self.records))

    def tracebacks(self) -> list[str]:
        """Records with an exception attached, or uvicorn's unhandled-exception line."""
        return [
            self.format(r)
            for r in list(self.records)
            if r.exc_info is not None or "Exception in ASGI application" in r.getMessage()
        ]


@dataclass
class Secured:
    gw: GatewayHandle
    keys_path: Path
    logs: Records
    sims: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.gw.url


@contextmanager
def secured_gateway(folder: Path, **overrides: object) -> Iterator[Secured]:
    """Two fast engines behind a gateway with keys, an admin token and the access log."""
    logs = Records()
    root = logging.getLogger()
    previous = root.level
    root.addHandler(logs)
    root.setLevel(logging.INFO)
    try:
        with run_sim_in_thread(fast_sim(1)) as s0, run_sim_in_thread(fast_sim(2)) as s1:
            policy = write_policy(
                folder / "policy.yaml",
                {
                    "backends": [
                        sim_backend("b0", s0.url, "plain"),
                        sim_backend("b1", s1.url, "plain"),
                    ]
                },
            )
            keys = write_keys(
                folder / "keys.yaml",
                {
                    TENANT_KEY: "tenant-a",
                    OTHER_KEY: "tenant-b",
                    REVOKED_KEY: "tenant-a",
                    LIMITED_KEY: "tenant-c",
                },
            )
            settings = Settings(
                policy_path=policy,
                port=0,
                keys_file=keys,
                admin_token=ADMIN_TOKEN,
                access_log=True,
                scrape_interval_s=0.5,
                policy_poll_s=0.2,
                **overrides,  # type: ignore[arg-type]
            )
            with run_gateway(settings) as gw:
                # The revocation: the file rewritten without the key, picked up by the
                # gateway's watch (as a remounted Kubernetes Secret would be).
                kept = {TENANT_KEY: "tenant-a", OTHER_KEY: "tenant-b", LIMITED_KEY: "tenant-c"}
                write_keys(folder / "keys.yaml", kept)
                gw.wait_for(lambda: _revoked(gw), what="the revoked key to be dropped")
                yield Secured(gw, keys, logs, [s0.url, s1.url])
    finally:
        root.removeHandler(logs)
        root.setLevel(previous)


def _revoked(gw: GatewayHandle) -> bool:
    door = gw.app.state.passthrough.door
    return door.keys is not None and door.keys.tenant_for(REVOKED_KEY) is None
