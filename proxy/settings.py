"""Process settings: one object, filled from CLI flags and ``SPECROUTE_*`` variables.

Everything that belongs to the fleet and routing lives in the policy file (hot-reloadable);
what is here is fixed for the life of the process.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

ENV_PREFIX = "SPECROUTE_"


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) only accepts this machine's clients."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    policy_path: Path | None = Field(
        default=None, description="policy YAML; None runs the embedded simulated fleet"
    )
    watch_policy: bool = True
    policy_poll_s: float = Field(default=1.0, gt=0)
    admin_token: str | None = Field(
        default=None, description="bearer token for /admin; None allows loopback clients only"
    )
    redis_url: str | None = None
    workers: int = Field(default=1, ge=1)

    upstream_client: Literal["h1", "aiohttp", "httpx"] = "h1"
    connect_timeout_s: float = Field(default=3.0, gt=0)
    first_byte_timeout_s: float = Field(default=60.0, gt=0)
    # The first byte's wait over all of a request's attempts (retries on other backends):
    # each attempt waits at most first_byte_timeout_s and at most what is left of this.
    # None: twice first_byte_timeout_s (a slow first try still leaves a whole retry).
    first_byte_budget_s: float | None = Field(default=None, gt=0)
    idle_timeout_s: float = Field(default=30.0, gt=0)
    max_attempts: int = Field(default=3, ge=1, le=10)
    # Stream resumption (proxy/gateway/resume.py): a chat/completions stream whose backend
    # fails after the first byte is continued on another backend of the same model, at most
    # max_resumes times per request.
    resume_streams: bool = True
    max_resumes: int = Field(default=2, ge=0, le=10)
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    upstream_pool_size: int = Field(default=1024, ge=1)

    # What a client can hold of the server (proxy/gateway/server_limits.py): a request
    # header must be complete within http_header_timeout_s and at most http_max_header_bytes
    # (else 431) and its body complete within http_body_timeout_s of the header (else 408
    # and a closed connection); idle kept-alive connections close after http_keep_alive_s; past
    # http_limit_concurrency open connections plus requests, uvicorn answers 503.
    http_header_timeout_s: float = Field(default=10.0, gt=0)
    http_max_header_bytes: int = Field(default=64 * 1024, ge=1024)
    http_body_timeout_s: float = Field(default=30.0, gt=0)
    http_keep_alive_s: int = Field(default=30, ge=1)
    http_limit_concurrency: int | None = Field(default=4096, ge=1)

    scrape_interval_s: float = Field(default=2.0, gt=0)
    health_failures_to_eject: int = Field(default=2, ge=1)
    memory_trim_interval_s: float = Field(
        default=30.0,
        ge=0,
        description="how often freed C-heap pages are handed back to the system "
        "(proxy/memory.py); 0: never",
    )
    # Passive outlier detection and overload back-off (proxy/routing/outlier.py; defaults
    # after Envoy's outlier_detection).
    outlier_consecutive_failures: int = Field(default=5, ge=1)
    outlier_base_ejection_s: float = Field(default=30.0, gt=0)
    outlier_max_ejection_s: float = Field(default=300.0, gt=0)
    outlier_max_ejection_percent: float = Field(default=10.0, ge=0, le=100)
    overload_backoff_s: float = Field(default=5.0, ge=0)
    overload_max_backoff_s: float = Field(default=60.0, ge=0)
    store_sync_interval_s: float = Field(default=0.1, gt=0)
    # The prefix index (proxy/routing/prefix_share.py): records shared through the store
    # every prefix_sync_interval_s (False: each replica keeps its own), older than
    # prefix_share_max_age_s ignored.
    prefix_share: bool = True
    prefix_sync_interval_s: float = Field(default=0.25, gt=0)
    prefix_share_max_age_s: float = Field(default=300.0, gt=0)
    log_level: str = "info"
    log_format: Literal["text", "json"] = Field(
        default="text", description="json: one JSON object per line, for log pipelines"
    )
    access_log: bool = Field(
        default=False, description="one line per relayed request on the specroute.access logger"
    )
    sim_logs: bool = Field(
        default=False, description="let the embedded simulators log their own start/stop lines"
    )

    # The traffic log (proxy/gateway/traffic_log.py): one JSON line per request, opt-in.
    traffic_log_path: Path | None = Field(default=None, description="JSONL file; None: off")
    traffic_log_max_bytes: int = Field(default=64 * 1024 * 1024, ge=4096)
    traffic_log_backups: int = Field(default=5, ge=0)
    traffic_log_text: bool = Field(default=False, description="also log prompt messages")
    traffic_log_queue: int = Field(default=10_000, ge=1)
    traffic_log_store: bool = Field(
        default=False, description="also append to the store's 'traffic' log (Redis stream)"
    )
    traffic_log_store_maxlen: int = Field(default=100_000, ge=1)

    shutdown_drain_s: int = Field(
        default=5,
        ge=0,
        description="on SIGTERM, how long open requests (streams) may run on before they are "
        "cut; keep it under the orchestrator's grace period minus any preStop pause",
    )

    # The public face: who may call, from which browsers, through which proxies.
    keys_file: Path | None = Field(
        default=None,
        description="API keys and tenants (YAML/JSON); None: open mode, no key needed",
    )
    cors_allow_origins: list[str] = Field(
        default_factory=list, description="origins browsers may call from; empty: CORS off"
    )
    cors_allow_methods: list[str] = Field(default_factory=lambda: ["GET", "POST", "OPTIONS"])
    cors_allow_headers: list[str] = Field(
        default_factory=lambda: ["authorization", "content-type", "x-request-id"]
    )
    route_headers: bool = Field(
        default=True,
        description="x-specroute-backend/-route on responses (the fleet's layout: turn off "
        "for public deployments; x-specroute-class stays)",
    )
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description="addresses or networks whose X-Forwarded-For names the real client",
    )
    # What a policy may point at and run: set here, not in the policy, because a policy
    # arrives by file, by PUT /admin/policy and through the shared store, and an edit must
    # not be able to widen its own limits.
    backend_url_allow: list[str] = Field(
        default_factory=list,
        description="URL prefixes every backend url of a policy must start with, e.g. "
        "http://10.0.0.,http://vllm-; empty: any",
    )
    plugin_modules: list[str] = Field(
        default_factory=list,
        description="modules a policy may name its own plugins from (module:Class); an entry "
        "ending in '.' allows a package; empty: built-in plugins only",
    )

    # The Endpoint Picker face (`specroute epp`, proxy/epp/): Envoy's ext_proc on grpc_port,
    # the gRPC health services on health_port (the reference picker's 9002 and 9003), the
    # admin API, /metrics and /ui over HTTP on `port` (9090 when started by `specroute epp`).
    grpc_port: int = Field(default=9002, ge=0, le=65535)
    health_port: int = Field(default=9003, ge=0, le=65535)
    grpc_tls: Literal["self-signed", "files", "off"] = Field(
        default="self-signed",
        description="the ext_proc server's TLS: a certificate made at start (as the reference "
        "picker serves by default), grpc_cert_path/grpc_key_path, or plaintext",
    )
    grpc_cert_path: Path | None = None
    grpc_key_path: Path | None = None
    # Addresses after the primary in the picker's answer, for a data plane whose retries go
    # down the list; 0 as the reference picker (one endpoint): Envoy's ORIGINAL_DST cluster
    # reads the header as one address and fails a list.
    fallback_endpoints: int = Field(default=0, ge=0, le=8)

    @field_validator(
        "cors_allow_origins",
        "cors_allow_methods",
        "cors_allow_headers",
        "trusted_proxies",
        "backend_url_allow",
        "plugin_modules",
        mode="before",
    )
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        """``SPECROUTE_CORS_ALLOW_ORIGINS=https://a,https://b`` as well as a list."""
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for entry in value:
            ipaddress.ip_network(entry, strict=False)  # ValueError names the bad entry
        return value

    @model_validator(mode="after")
    def _admin_exposure(self) -> Settings:
        # Without a token the admin API trusts loopback clients; on a public address that
        # trust is one reverse proxy away from anyone (a same-host proxy is loopback too).
        if self.admin_token is None and not is_loopback(self.host):
            raise ValueError(
                f"refusing to listen on {self.host} without an admin token: the admin API "
                "(policy changes, quarantines) would trust any client a local proxy "
                "forwards; set SPECROUTE_ADMIN_TOKEN (or --admin-token), or bind 127.0.0.1"
            )
        return self

    @property
    def first_byte_budget(self) -> float:
        if self.first_byte_budget_s is not None:
            return self.first_byte_budget_s
        return 2 * self.first_byte_timeout_s

    @classmethod
    def from_env(
        cls, overrides: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
    ) -> Settings:
        """Settings from ``SPECROUTE_<FIELD>`` variables, then explicit ``overrides``."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            raw = env.get(ENV_PREFIX + name.upper())
            if raw is not None and raw != "":
                values[name] = raw
        values.update({k: v for k, v in (overrides or {}).items() if v is not None})
        return cls.model_validate(values)
