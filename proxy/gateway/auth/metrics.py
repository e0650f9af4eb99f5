"""Per-tenant usage for Prometheus: requests and tokens by model, class and pool."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter


class TenantMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ["tenant", "model", "class", "pool"]
        self.requests = Counter(
            "specroute_tenant_requests",
            "Requests admitted per tenant, by model, endpoint, prompt class, pool and result",
            ["tenant", "model", "endpoint", "class", "pool", "result"],
            registry=registry,
        )
        self.prompt_tokens = Counter(
            "specroute_tenant_prompt_tokens",
            "Prompt tokens per tenant, as the backends reported them",
            labels,
            registry=registry,
        )
        self.completion_tokens = Counter(
            "specroute_tenant_completion_tokens",
            "Completion tokens per tenant, as the backends reported them",
            labels,
            registry=registry,
        )
        self.refusals = Counter(
            "specroute_tenant_refusals",
            "Requests refused at the front door, by tenant ('' before a key matched) and reason",
            ["tenant", "reason"],
            registry=registry,
        )
        self.keys_reloads = Counter(
            "specroute_keys_reloads",
            "Changes of the keys file seen, by result (ok: new keys in force; refused: "
            "invalid file, the previous keys kept)",
            ["result"],
            registry=registry,
        )

    def record(
        self,
        tenant: str,
        model: str,
        endpoint: str,
        label: str,
        pool: str,
        ok: bool,
        prompt_tokens: int | None,
        completion_tokens: int | None,
    ) -> None:
        result = "ok" if ok else "error"
        self.requests.labels(tenant, model, endpoint, label, pool, result).inc()
        if prompt_tokens:
            self.prompt_tokens.labels(tenant, model, label, pool).inc(prompt_tokens)
        if completion_tokens:
            self.completion_tokens.labels(tenant, model, label, pool).inc(completion_tokens)

    def refused(self, tenant: str, reason: str) -> None:
        self.refusals.labels(tenant, reason).inc()

    def keys_reloaded(self, ok: bool) -> None:
        self.keys_reloads.labels("ok" if ok else "refused").inc()
