"""The routing policy: the YAML document SREs edit, and its schema.

A policy declares the fleet (backends grouped into pools), how requests are scored and
picked, and the shadow / canary / classifier settings. It is validated as a whole before it
is swapped in, so a bad edit never half-applies; errors name the file, the path inside the
document and the reason.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from proxy.policy.admission import AdmissionSettings
from proxy.policy.canary import CanaryConfig
from proxy.policy.classifier import ClassifierConfig
from proxy.policy.discovery import DiscoveryConfig
from proxy.policy.latency import LatencySettings, OverloadSettings, SloSettings
from proxy.policy.shadow import ShadowConfig

_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
# Headers of the upstream request the gateway owns.
_OWN_HEADERS = frozenset(
    {"authorization", "content-type", "content-length", "host", "x-request-id",
     "transfer-encoding", "connection"}
)  # fmt: skip

SpecMethod = Literal["none", "ngram", "suffix", "draft_model", "eagle", "eagle3", "mtp"]
# The serving engine behind a backend (proxy/engines/: metrics, health probe, API quirks).
EngineName = Literal["vllm", "sglang", "trtllm"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Speculation(_Strict):
    method: SpecMethod = "none"
    k: int = Field(default=0, ge=0, le=16, description="draft tokens per step")

    @property
    def enabled(self) -> bool:
        return self.method != "none"


class BackendSpec(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,62}$")
    url: str = Field(pattern=r"^https?://")
    model: str
    pool: str
    engine: EngineName = Field(
        default="vllm",
        description="the serving engine: vllm, sglang (`--enable-metrics`) or trtllm "
        "(`trtllm-serve` with `return_perf_metrics`); decides where load and acceptance "
        "are read and which request extensions the backend takes",
    )
    speculation: Speculation = Speculation()
    draft_version: str = ""
    weight: float = Field(default=1.0, gt=0)
    max_concurrency: int = Field(default=256, ge=1)
    # Credentials for a backend started with --api-key: the name of an environment
    # variable or of a file holding the key, never the key itself (the policy is shown
    # at GET /admin/policy and kept in the store).
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    api_key_file: str | None = None
    headers: dict[str, str] = Field(
        default_factory=dict, description="extra headers sent to this backend"
    )
    launch_config: str | None = Field(
        default=None,
        description="the engine's launch config, relative to the policy file: `vllm serve "
        "--config`, `sglang serve --config` or `trtllm-serve --extra_llm_api_options`, as "
        "`engine` says; read by `specroute check` only",
    )

    @field_validator("url")
    @classmethod
    def _strip_slash(cls, value: str) -> str:
        return value.rstrip("/")

    @field_validator("headers")
    @classmethod
    def _header_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not _HEADER_NAME.match(name) or "\n" in text or "\r" in text:
                raise ValueError(f"header {name!r} is not a valid HTTP header")
            if name.lower() in _OWN_HEADERS:
                raise ValueError(
                    f"header {name!r} is set by the gateway (for a key, use api_key_env "
                    "or api_key_file)"
                )
        return value

    @model_validator(mode="after")
    def _one_key_source(self) -> BackendSpec:
        if self.api_key_env is not None and self.api_key_file is not None:
            raise ValueError("give api_key_env or api_key_file, not both")
        return self


class BreakEven(_Strict):
    """Where speculation stops paying for a speculative pool, in concurrent requests per backend.

    ``static`` uses ``concurrency``; ``learned`` starts from it and follows the crossover of
    measured time per output token of this pool against the plain pool.
    """

    mode: Literal["static", "learned"] = Field(
        default="static",
        description="static: `concurrency` always; learned: start there, follow measurements",
    )
    concurrency: float = Field(
        default=64, gt=0, description="Concurrent requests per backend where speculation stops"
    )
    hysteresis: float = Field(
        default=0.15,
        ge=0,
        lt=1,
        description="Off at concurrency x (1 + h), on again at x (1 - h): no flapping",
    )
    min_samples: int = Field(
        default=30, ge=1, description="Requests of each pool before a learned estimate counts"
    )
    half_life_s: float = Field(
        default=120.0, gt=0, description="Age at which a TPOT sample weighs half (learned)"
    )
    min_effect: float = Field(
        default=0.1,
        ge=0,
        description=(
            "Learned: the threshold moves only to an estimate this share away from it "
            "(and whose 95% interval excludes it)"
        ),
    )
    max_interval: float = Field(
        default=0.3,
        gt=0,
        description=(
            "Learned: an estimate whose 95% interval is wider than this share of it either "
            "side is reported, not acted on"
        ),
    )


class PoolSpec(_Strict):
    break_even: BreakEven = BreakEven()


class PluginSpec(_Strict):
    type: str
    weight: float = Field(default=1.0, ge=0)
    params: dict[str, Any] = Field(default_factory=dict)


def _default_filters() -> list[PluginSpec]:
    names = ("model", "healthy", "quarantine", "canary", "capacity", "acceptance_floor")
    return [PluginSpec(type=name) for name in names]


def _default_scorers() -> list[PluginSpec]:
    # Break-even as a cap (a plain backend scores what a speculative one below break-even
    # does), the acceptance scorer as the bias towards speculation that pays for the class,
    # and load (counting prompt tokens pending prefill) weighed so that a backend's bias is
    # spent in tens of requests or a few long prompts: the best of the routing-quality
    # benchmark's variants (loadtests/routing/routing_policies.py, report in loadtests/reports/).
    return [
        PluginSpec(type="break_even", weight=4.0, params={"plain_score": 1.0}),
        PluginSpec(type="acceptance", weight=1.0),
        PluginSpec(type="load", weight=4.0, params={"prefill_tokens_full": 16384}),
    ]


class RoutingProfile(_Strict):
    filters: list[PluginSpec] = Field(default_factory=_default_filters)
    scorers: list[PluginSpec] = Field(default_factory=_default_scorers)
    picker: PluginSpec = PluginSpec(type="max_score")


class AcceptanceSettings(_Strict):
    """Windowed acceptance per backend and per (backend, class)."""

    window: int = Field(default=50, ge=1, description="requests per (backend, class) window")
    floor: float = Field(default=0.25, ge=0, le=1)
    recent: int = Field(
        default=8, ge=1, description="requests the floor is judged on (a collapse shows fast)"
    )
    min_samples: int = Field(default=5, ge=1)
    probe_every: int = Field(
        default=20, ge=1, description="send 1 in N requests to a backend below the floor"
    )
    priors: dict[str, dict[str, float]] = Field(
        # Draft acceptance rates (accepted / drafted tokens) to assume per method and class
        # until measured: prompt lookup copies from code and retrieved text, barely from chat.
        default_factory=lambda: {
            "ngram": {"code": 0.5, "rag": 0.55, "chat": 0.1},
            "suffix": {"code": 0.5, "rag": 0.55, "chat": 0.12},
            "draft_model": {"code": 0.5, "rag": 0.5, "chat": 0.45},
            "eagle": {"code": 0.5, "rag": 0.45, "chat": 0.45},
            "eagle3": {"code": 0.6, "rag": 0.55, "chat": 0.5},
            "mtp": {"code": 0.55, "rag": 0.55, "chat": 0.5},
        }
    )


class StoreSpec(_Strict):
    redis_url: str | None = None


class Policy(_Strict):
    """The whole routing policy document."""

    version: str = ""
    backends: list[BackendSpec] = Field(
        default_factory=list,
        description="the static backends; may be empty when `discovery` finds them",
    )
    discovery: DiscoveryConfig | None = Field(
        default=None,
        description="backends from the Kubernetes pods of an InferencePool, besides `backends`",
    )
    pools: dict[str, PoolSpec] = Field(default_factory=dict)
    routing: RoutingProfile = RoutingProfile()
    acceptance: AcceptanceSettings = AcceptanceSettings()
    slo: SloSettings = SloSettings()
    latency: LatencySettings = LatencySettings()
    overload: OverloadSettings = OverloadSettings()
    admission: AdmissionSettings = AdmissionSettings()
    classifier: ClassifierConfig = ClassifierConfig()
    store: StoreSpec = StoreSpec()
    # Sections owned by later features are validated by their own models when present.
    shadow: ShadowConfig = ShadowConfig()
    canary: CanaryConfig | None = None

    @model_validator(mode="after")
    def _check_fleet(self) -> Policy:
        if self.discovery is not None:
            _check_templates(self.discovery)
        elif not self.backends:
            raise ValueError("a policy needs at least one backend, or a discovery section")
        pools = {b.pool for b in self.backends}
        # With discovery, pods bring pools and models the document cannot know in advance:
        # naming one before its first pod is ready is no error.
        known = self.discovery is None
        ref = self.shadow.reference_pool
        if ref is not None:
            if known and ref not in pools:
                raise ValueError(f"shadow.reference_pool {ref!r} is not a pool of this policy")
            if any(b.speculation.enabled for b in self.backends if b.pool == ref):
                raise ValueError(f"shadow.reference_pool {ref!r} must not use speculation")
        dupes = [n for n, c in Counter(b.name for b in self.backends).items() if c > 1]
        if dupes:
            raise ValueError(f"backend names must be unique; repeated: {', '.join(sorted(dupes))}")
        methods: dict[str, set[str]] = {}
        for backend in self.backends:
            methods.setdefault(backend.pool, set()).add(backend.speculation.method)
        mixed = sorted(p for p, m in methods.items() if len(m) > 1)
        if mixed:
            raise ValueError(
                "every backend of a pool must use the same speculation method; "
                f"mixed pools: {', '.join(mixed)}"
            )
        if self.canary is not None:
            self._check_canary(self.canary)
        unknown = sorted(set(self.pools) - set(methods)) if known else []
        if unknown:
            raise ValueError(f"pools section names pools without backends: {', '.join(unknown)}")
        unknown = sorted(set(self.latency.pools) - set(methods)) if known else []
        if unknown:
            raise ValueError(f"latency.pools names pools without backends: {', '.join(unknown)}")
        unknown = sorted(set(self.slo.models) - {b.model for b in self.backends}) if known else []
        if unknown:
            raise ValueError(f"slo.models names models no backend serves: {', '.join(unknown)}")
        return self

    def _check_canary(self, canary: CanaryConfig) -> None:
        by_name = {b.name: b for b in self.backends}
        missing = [n for n in canary.candidates + canary.baseline if n not in by_name]
        if missing:
            raise ValueError(f"canary names unknown backends: {', '.join(missing)}")
        if set(canary.candidates) & set(canary.baseline):
            raise ValueError("canary candidates and baseline must differ")
        # A canary splits one model's traffic (between two draft heads or two engines);
        # arms serving different models would never see the same requests.
        served = sorted({by_name[n].model for n in canary.candidates})
        judged = sorted({by_name[n].model for n in canary.baseline})
        if served != judged:
            raise ValueError(
                "canary candidates and baseline must serve the same models; candidates: "
                f"{', '.join(served)}, baseline: {', '.join(judged)}"
            )
        plain = [n for n in canary.candidates if not by_name[n].speculation.enabled]
        if plain:
            raise ValueError(f"canary candidates must use speculation: {', '.join(plain)}")
        if not any(f.type == "canary" for f in self.routing.filters):
            raise ValueError("a canary needs the 'canary' filter in routing.filters")

    def pool_names(self) -> list[str]:
        return sorted({b.pool for b in self.backends})

    def pool_spec(self, pool: str) -> PoolSpec:
        return self.pools.get(pool, PoolSpec())

    def models(self) -> list[str]:
        return sorted({b.model for b in self.backends})


def _check_templates(discovery: DiscoveryConfig) -> None:
    """Each discovery template, as the backend it would make (a placeholder name, address,
    model and pool where it gives none): an unknown engine or speculation method is refused
    when the policy loads, not when the first pod arrives."""
    base = discovery.template.model_dump(exclude_none=True)
    templates = {"template": base} | {
        f"pools.{pool}": base | {"pool": pool} | t.model_dump(exclude_none=True)
        for pool, t in discovery.pools.items()
    }
    for where, fields in templates.items():
        probe = {"name": "template", "url": "http://127.0.0.1", "model": "m", "pool": "p"}
        try:
            BackendSpec.model_validate(probe | fields)
        except ValidationError as exc:
            problems = "; ".join(_format_validation(exc))
            raise ValueError(f"discovery.{where}: {problems}") from None


class PolicyError(ValueError):
    """A policy that cannot be used, with one line per problem."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: invalid policy:\n" + "\n".join(f"  - {p}" for p in problems))


def _format_validation(exc: ValidationError) -> list[str]:
    problems = []
    for err in exc.errors():
        path = ".".join(str(p) for p in err["loc"]) or "<document>"
        problems.append(f"{path}: {err['msg']}")
    return problems


def _not_unicode(data: object, path: str) -> str | None:
    """Where a string holds a lone surrogate (YAML and JSON read ``"\\ud800"`` into one), or
    ``None``: such a string is no UTF-8, so validation, the store and every JSON answer
    would fail on it later."""
    if isinstance(data, str):
        try:
            data.encode("utf-8")
        except UnicodeEncodeError:
            return path
    elif isinstance(data, dict):
        for key, value in data.items():
            inner = f"{path}.{key}" if path else str(key)
            if (found := _not_unicode(key, inner) or _not_unicode(value, inner)) is not None:
                return found.encode("utf-8", "backslashreplace").decode()
    elif isinstance(data, list):
        for i, value in enumerate(data):
            if (found := _not_unicode(value, f"{path}.{i}")) is not None:
                return found
    return None


def parse_policy(text: str | bytes, source: str = "<policy>") -> Policy:
    """Parse and validate YAML (or JSON, a subset of YAML) policy text."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PolicyError(source, [f"not valid YAML: {exc}"]) from exc
    if not isinstance(data, dict):
        raise PolicyError(source, ["<document>: a policy is a mapping with at least 'backends'"])
    if (where := _not_unicode(data, "")) is not None:
        raise PolicyError(source, [f"{where or '<document>'}: a lone surrogate is not text"])
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        raise PolicyError(source, _format_validation(exc)) from exc


def load_policy(path: str | Path) -> Policy:
    path = Path(path)
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise PolicyError(str(path), [f"cannot read: {exc.strerror}"]) from exc
    return parse_policy(text, str(path))
