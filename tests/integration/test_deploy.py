"""The Kubernetes overlays, rendered and checked the way a cluster and the gateway would see them.

Every overlay under deploy/kubernetes/overlays is rendered with kustomize; each object is
validated against the Kubernetes OpenAPI schemas (kubernetes-validate, strict: unknown
fields fail). The Prometheus Operator's custom resources have no schema there and are
checked structurally. Then the parts are checked against each other: the policy in the
ConfigMap against the Services, the engines against their launch configs, the gateway's
environment against its settings.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import kubernetes_validate
import pytest
import yaml

from proxy.check import ModelResolver, check_deployment
from proxy.cli import build_parser
from proxy.embedded import start_embedded_fleet
from proxy.gateway.app import create_app
from proxy.gateway.runtime import Runtime
from proxy.policy import load_policy, parse_policy
from proxy.settings import ENV_PREFIX, Settings
from tests.kustomize_render import OVERLAYS, REPO, Rendered, container, kustomize, selects

KUBERNETES_VERSION = "1.32"
CUSTOM_KINDS = {"ServiceMonitor", "PrometheusRule"}
GATEWAY = "specroute-gateway"


@pytest.fixture(scope="module", params=OVERLAYS, ids=lambda p: p.name)
def rendered(request: pytest.FixtureRequest) -> Rendered:
    return Rendered(request.param, kustomize(request.param))


# -- schemas ----------------------------------------------------------------------------


def test_every_object_validates_against_the_kubernetes_schemas(rendered: Rendered) -> None:
    unvalidated = set()
    for obj in rendered.objects:
        if obj["kind"] in CUSTOM_KINDS:
            unvalidated.add(obj["kind"])
            continue
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == rendered.namespace, obj["metadata"]["name"]
    assert unvalidated <= CUSTOM_KINDS


def test_the_schema_validation_refuses_a_misspelt_field(rendered: Rendered) -> None:
    broken = copy.deepcopy(rendered.get("Deployment", GATEWAY))
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["pth"] = "/"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_monitoring_resources_are_well_formed(rendered: Rendered) -> None:
    """The custom resources, checked by hand: the scrape finds the gateway, the rules are rules."""
    if not rendered.of_kind("ServiceMonitor"):
        assert not rendered.of_kind("PrometheusRule")
        return
    [monitor] = rendered.of_kind("ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    service = rendered.get("Service", "specroute")
    assert selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    port_names = {p["name"] for p in service["spec"]["ports"]}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= port_names
    [rule] = rendered.of_kind("PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(rule["spec"]) == {"groups"}
    for group in rule["spec"]["groups"]:
        assert set(group) <= {"name", "interval", "rules", "limit"}
        for r in group["rules"]:
            assert set(r) <= {"alert", "expr", "for", "labels", "annotations", "keep_firing_for"}
            assert r["alert"][0].isupper()
            assert r["expr"].strip()
            assert r["labels"]["severity"] in {"critical", "warning", "info"}


def test_alert_rules_pass_promtool(tmp_path: Path) -> None:
    """The PrometheusRule's groups are a Prometheus rule file: promtool parses every expression."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool is not installed (it comes with Prometheus)"
    rule = yaml.safe_load(
        (REPO / "deploy/kubernetes/components/monitoring/prometheusrule.yaml").read_text()
    )
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    checked = subprocess.run(
        [promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


async def test_alert_rules_use_only_metrics_the_gateway_exports() -> None:
    """Every specroute_* series an alert reads appears on the embedded fleet's /metrics."""
    rule_file = REPO / "deploy/kubernetes/components/monitoring/prometheusrule.yaml"
    exprs = [
        r["expr"]
        for g in yaml.safe_load(rule_file.read_text())["spec"]["groups"]
        for r in g["rules"]
    ]
    wanted = {name for expr in exprs for name in re.findall(r"\bspecroute_[a-z_]+", expr)}
    assert wanted
    app = create_app(Settings(scrape_interval_s=0.2), local_fleet=start_embedded_fleet)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            body = {"model": "sim-llama-8b", "messages": [{"role": "user", "content": "hi"}]}
            assert (
                await client.post("/v1/chat/completions", json=body | {"max_tokens": 3})
            ).status_code == 200
            exported = (await client.get("/metrics")).text
    names = {line.split()[2] for line in exported.splitlines() if line.startswith("# TYPE ")}
    # Counters are exported with _total; histograms add _bucket/_sum/_count to the family.
    suffixes = ("_total", "_bucket", "_sum", "_count")
    assert wanted <= names | {n + s for n in names for s in suffixes}, wanted - names


# -- the policy and the Services ----------------------------------------------------------


def test_the_policy_validates_and_is_the_overlays_file(rendered: Rendered) -> None:
    policy = parse_policy(rendered.policy_text, "ConfigMap specroute-policy")
    Runtime.check_policy(policy)
    assert rendered.policy_text == (rendered.overlay / "policy.yaml").read_text()


def _service_for(url: str, default_namespace: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    assert parts.scheme == "http" and parts.hostname and parts.port, url
    labels = parts.hostname.split(".")
    # name | name.namespace | name.namespace.svc | name.namespace.svc.cluster.local
    assert len(labels) in (1, 2, 3, 5), url
    if len(labels) > 2:
        assert labels[2:] in (["svc"], ["svc", "cluster", "local"]), url
    namespace = labels[1] if len(labels) > 1 else default_namespace
    return labels[0], namespace, parts.port


def test_every_backend_url_is_a_service_of_the_overlay_with_engine_pods(rendered: Rendered) -> None:
    policy = parse_policy(rendered.policy_text)
    services = {
        (s["metadata"]["name"], s["metadata"]["namespace"]): s for s in rendered.of_kind("Service")
    }
    for backend in policy.backends:
        name, namespace, port = _service_for(backend.url, rendered.namespace)
        service = services.get((name, namespace))
        assert service is not None, f"{backend.name}: no Service {namespace}/{name}"
        assert port in {p["port"] for p in service["spec"]["ports"]}, backend.url
        [engine] = [
            d
            for d in rendered.engines()
            if selects(service["spec"]["selector"], d["spec"]["template"]["metadata"]["labels"])
        ]
        assert engine["metadata"]["labels"]["specroute.io/pool"] == backend.pool


# -- the engines ------------------------------------------------------------------------


def _engine_launch(rendered: Rendered, engine: dict[str, Any]) -> dict[str, Any]:
    volumes = {v["name"]: v for v in engine["spec"]["template"]["spec"]["volumes"]}
    args = container(engine)["args"]
    assert args[:2] == ["--config", "/etc/vllm/launch.yaml"]
    mount = next(m for m in container(engine)["volumeMounts"] if m["mountPath"] == "/etc/vllm")
    config_map = rendered.get("ConfigMap", volumes[mount["name"]]["configMap"]["name"])
    return dict(yaml.safe_load(config_map["data"]["launch.yaml"]))


def test_engines_run_the_launch_config_their_policy_backend_names(rendered: Rendered) -> None:
    """What the policy says an engine runs (and `specroute check` checks) is what it runs."""
    policy = parse_policy(rendered.policy_text)
    by_pool = {b.pool: b for b in policy.backends}
    for engine in rendered.engines():
        backend = by_pool[engine["metadata"]["labels"]["specroute.io/pool"]]
        assert backend.launch_config is not None
        named = yaml.safe_load((rendered.overlay / backend.launch_config).read_text())
        assert _engine_launch(rendered, engine) == named


def test_engine_gpus_match_the_tensor_parallel_size(rendered: Rendered) -> None:
    for engine in rendered.engines():
        launch = _engine_launch(rendered, engine)
        args = container(engine)["args"]
        assert "--tensor-parallel-size" not in args and "-tp" not in args
        resources = container(engine)["resources"]
        tp = int(launch.get("tensor-parallel-size", 1))
        assert (
            resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == tp
        )
        probe = container(engine)["readinessProbe"]["httpGet"]
        assert probe["path"] == "/health"
        assert probe["port"] in {p["name"] for p in container(engine)["ports"]}


def test_specroute_check_passes_the_overlay_policy(rendered: Rendered) -> None:
    path = rendered.overlay / "policy.yaml"
    report = check_deployment(load_policy(path), path, ModelResolver())
    assert report.ok, [str(f) for f in report.findings]
    assert report.engines_checked == len(rendered.engines())
    # The overlays' engines run the repository's GPU launch configs, not copies.
    for backend in load_policy(path).backends:
        assert backend.launch_config is not None
        named = (path.parent / backend.launch_config).resolve()
        assert named.is_relative_to(REPO / "deploy/vllm/gpu"), named


# -- the gateway ------------------------------------------------------------------------


def _gateway_environ(rendered: Rendered) -> dict[str, str]:
    """The gateway's environment as the kubelet would build it (Secret values as placeholders)."""
    secret = rendered.generated("Secret", "specroute-secrets")
    environ: dict[str, str] = {}
    for var in container(rendered.get("Deployment", GATEWAY))["env"]:
        if "valueFrom" in var:
            ref = var["valueFrom"]["secretKeyRef"]
            assert ref["name"] == secret["metadata"]["name"]
            assert ref["key"] in secret["data"], ref["key"]
            environ[var["name"]] = f"placeholder-{ref['key']}"
        else:
            value = var["value"]
            for name, known in environ.items():
                value = value.replace(f"$({name})", known)
            assert "$(" not in value, var
            environ[var["name"]] = value
    return environ


def test_gateway_environment_and_arguments_are_its_settings(rendered: Rendered) -> None:
    environ = _gateway_environ(rendered)
    fields = {ENV_PREFIX + name.upper() for name in Settings.model_fields}
    ours = {name for name in environ if name.startswith(ENV_PREFIX)}
    assert ours <= fields, ours - fields
    assert {"SPECROUTE_ADMIN_TOKEN", "SPECROUTE_REDIS_URL", "SPECROUTE_HOST"} <= ours
    gateway = container(rendered.get("Deployment", GATEWAY))
    args = build_parser().parse_args(["serve", *gateway["args"]])
    settings = Settings.from_env({"policy_path": args.config}, environ=environ)
    assert settings.redis_url == "redis://:placeholder-redis-password@redis:6379/0"
    assert settings.port in {p["containerPort"] for p in gateway["ports"]}
    # --config names the file the policy ConfigMap puts in the mounted directory.
    volumes = {
        v["name"]: v
        for v in rendered.get("Deployment", GATEWAY)["spec"]["template"]["spec"]["volumes"]
    }
    mount = next(m for m in gateway["volumeMounts"] if volumes[m["name"]].get("configMap"))
    assert volumes[mount["name"]]["configMap"]["name"] == "specroute-policy"
    assert args.config == Path(mount["mountPath"]) / "policy.yaml"
    redis_host = urlsplit(settings.redis_url or "").hostname
    assert redis_host in {s["metadata"]["name"] for s in rendered.of_kind("Service")}


def test_gateway_runs_hardened_with_probes_budget_and_autoscaling(rendered: Rendered) -> None:
    deployment = rendered.get("Deployment", GATEWAY)
    pod = deployment["spec"]["template"]["spec"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    gateway = container(deployment)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert gateway["securityContext"]["readOnlyRootFilesystem"] is True
    assert gateway["securityContext"]["allowPrivilegeEscalation"] is False
    assert gateway["livenessProbe"]["httpGet"]["path"] == "/health"
    assert gateway["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert gateway["resources"]["requests"]["cpu"]
    [budget] = rendered.of_kind("PodDisruptionBudget")
    assert selects(budget["spec"]["selector"]["matchLabels"], labels)
    [hpa] = rendered.of_kind("HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == GATEWAY
    assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    # The autoscaler owns the replica count; a fixed one would be reset by every apply.
    assert "replicas" not in deployment["spec"]
    # The image's user (Dockerfile: useradd --uid) is the one the pod runs as.
    uid = re.search(r"useradd .*--uid (\d+)", (REPO / "Dockerfile").read_text())
    assert uid and pod["securityContext"]["runAsUser"] == int(uid.group(1))


def test_only_the_gateway_reaches_engines_and_redis(rendered: Rendered) -> None:
    gateway_labels = rendered.get("Deployment", GATEWAY)["spec"]["template"]["metadata"]["labels"]
    policies = rendered.of_kind("NetworkPolicy")
    assert any(p["spec"]["podSelector"] == {} and "ingress" not in p["spec"] for p in policies)
    guarded = [
        *rendered.engines(),
        *[d for d in rendered.of_kind("Deployment") if d["metadata"]["name"] == "redis"],
    ]
    assert len(guarded) == len(rendered.engines()) + 1
    for deployment in guarded:
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        admitting = [
            p
            for p in policies
            if p["spec"]["podSelector"]
            and selects(p["spec"]["podSelector"]["matchLabels"], pod_labels)
        ]
        assert admitting, deployment["metadata"]["name"]
        for policy in admitting:
            for rule in policy["spec"]["ingress"]:
                for peer in rule["from"]:
                    assert set(peer) == {"podSelector"}, policy["metadata"]["name"]
                    assert selects(peer["podSelector"]["matchLabels"], gateway_labels)


def test_prometheus_rule_wraps_the_alert_rule_file() -> None:
    """The operator's PrometheusRule carries exactly the groups of the rule file promtool tests."""
    rule_file = yaml.safe_load((REPO / "deploy/prometheus/specroute-alerts.yaml").read_text())
    wrapped = yaml.safe_load(
        (REPO / "deploy/kubernetes/components/monitoring/prometheusrule.yaml").read_text()
    )
    assert wrapped["spec"]["groups"] == rule_file["groups"]
