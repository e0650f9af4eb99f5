"""The Endpoint Picker component, rendered and checked the way a cluster, the gateway's data
plane and ``specroute epp`` would see it.

deploy/kubernetes/examples/envoy-gateway-picker is the single-gpu-dev overlay plus
components/endpoint-picker and an HTTPRoute. The render is checked to add to single-gpu-dev
without changing it, so what test_deploy.py checks of that overlay holds here too; then the
additions: the core objects against the Kubernetes schemas (kubernetes-validate, strict),
the InferencePool against the vendored CRD as the API server would check it, and the parts
against each other: the pool against the engine pods, the picker's discovery against the
pool and the gateway's policy, its Role against what discovery calls, its endpointPickerRef
against the picker's Service and container, the picker's arguments and environment against
its settings, the NetworkPolicies against who must reach whom.
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate
import pytest
import yaml

from proxy.cli import build_parser
from proxy.discovery import Pod, backend_for, with_pods
from proxy.discovery.kubeapi import SERVICE_ACCOUNT
from proxy.policy import Policy, parse_policy
from proxy.settings import ENV_PREFIX, Settings
from tests.integration.test_deploy import KUBERNETES_VERSION
from tests.kustomize_render import REPO, Rendered, container, kustomize, selects

EXAMPLE = REPO / "deploy/kubernetes/examples/envoy-gateway-picker"
BASE_OVERLAY = REPO / "deploy/kubernetes/overlays/single-gpu-dev"
CRD = REPO / "deploy/kubernetes/crds/inferencepools.yaml"
PICKER = "specroute-epp"
GATEWAY = "specroute-gateway"
# Kinds whose schemas kubernetes-validate does not have: the InferencePool is checked against
# the vendored CRD, the HTTPRoute (Gateway API, not vendored) by hand.
CUSTOM_KINDS = {"InferencePool", "HTTPRoute"}
# The gRPC health services of the Endpoint Picker Protocol.
HEALTH_SERVICES = {"liveness", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor"}
# What `specroute epp` takes on its command line, and the setting each flag fills.
EPP_FLAGS = {
    "--config": "policy_path",
    "--grpc-port": "grpc_port",
    "--health-port": "health_port",
    "--http-port": "port",
    "--host": "host",
    "--log-format": "log_format",
}


@pytest.fixture(scope="module")
def rendered() -> Rendered:
    return Rendered(EXAMPLE, kustomize(EXAMPLE))


@pytest.fixture(scope="module")
def base() -> Rendered:
    return Rendered(BASE_OVERLAY, kustomize(BASE_OVERLAY))


def _pool(rendered: Rendered) -> dict[str, Any]:
    [pool] = rendered.of_kind("InferencePool")
    return pool


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


# -- the component adds to a deployment -----------------------------------------------------


def test_the_component_adds_to_the_overlay_and_changes_nothing_of_it(
    rendered: Rendered, base: Rendered
) -> None:
    """The picker finds the engine pods through the API: the engine Services stay as they
    are (no headless Services to recreate on a running install)."""
    ours = {_key(o): o for o in rendered.objects}
    theirs = {_key(o): o for o in base.objects}
    assert set(theirs) <= set(ours), set(theirs) - set(ours)
    for key, obj in theirs.items():
        assert ours[key] == obj, key
    added = sorted(k for k, _ in set(ours) - set(theirs))
    assert added == [
        "ConfigMap",
        "Deployment",
        "HTTPRoute",
        "InferencePool",
        *["NetworkPolicy"] * 4,
        "PodDisruptionBudget",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
    ]


def test_the_httproute_is_the_examples_not_the_components() -> None:
    """The route names the operator's Gateway: the component leaves it to the overlay."""
    component = REPO / "deploy/kubernetes/components/endpoint-picker"
    kustomization = yaml.safe_load((component / "kustomization.yaml").read_text())
    kinds = {
        doc["kind"]
        for name in kustomization["resources"]
        for doc in yaml.safe_load_all((component / name).read_text())
        if doc
    }
    assert "HTTPRoute" not in kinds and "InferencePool" in kinds


# -- schemas --------------------------------------------------------------------------------


def test_every_core_object_validates_against_the_kubernetes_schemas(rendered: Rendered) -> None:
    for obj in rendered.objects:
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == rendered.namespace, _key(obj)
        if obj["kind"] in CUSTOM_KINDS:
            # The API server checks their metadata as any object's: a ConfigMap's is the same.
            probe = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj["metadata"]}
            kubernetes_validate.validate(probe, KUBERNETES_VERSION, strict=True)
            continue
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def _crd_version(name: str) -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == name]
    return dict(version)


def _structural(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema as the API server applies it with strict field validation (kubectl's
    default since 1.27): a field the schema does not name is an error, not silently pruned."""
    node = dict(schema)
    if "properties" in node:
        node["properties"] = {k: _structural(v) for k, v in node["properties"].items()}
        if not node.get("x-kubernetes-preserve-unknown-fields"):
            node.setdefault("additionalProperties", False)
    if isinstance(node.get("additionalProperties"), dict):
        node["additionalProperties"] = _structural(node["additionalProperties"])
    if "items" in node:
        node["items"] = _structural(node["items"])
    return node


def _defaulted(value: Any, schema: dict[str, Any]) -> Any:
    """``value`` with the schema's defaults filled in, as the API server stores it."""
    if isinstance(value, dict) and "properties" in schema:
        out = dict(value)
        for name, prop in schema["properties"].items():
            if name not in out and "default" in prop:
                out[name] = copy.deepcopy(prop["default"])
            if name in out:
                out[name] = _defaulted(out[name], prop)
        return out
    if isinstance(value, list) and "items" in schema:
        return [_defaulted(v, schema["items"]) for v in value]
    return value


# The CRD's CEL rules (x-kubernetes-validations), translated by hand: nothing here evaluates
# CEL. test_every_cel_rule_of_the_crd_is_checked fails when the CRD gains one not listed.
CEL_RULES: dict[str, Callable[[Any], bool]] = {
    "self.kind != 'Service' || has(self.port)": lambda ref: (
        ref["kind"] != "Service" or "port" in ref
    ),
    "self.all(p1, self.exists_one(p2, p1.number==p2.number))": lambda ports: all(
        sum(p2["number"] == p1["number"] for p2 in ports) == 1 for p1 in ports
    ),
}


def _cel_checks(value: Any, schema: dict[str, Any]) -> Iterator[tuple[str, str, Any]]:
    """Every (rule, message, value) the CRD's CEL validations apply to in ``value``."""
    for check in schema.get("x-kubernetes-validations", []):
        yield check["rule"], check["message"], value
    if isinstance(value, dict):
        for name, prop in schema.get("properties", {}).items():
            if name in value:
                yield from _cel_checks(value[name], prop)
    if isinstance(value, list) and "items" in schema:
        for item in value:
            yield from _cel_checks(item, schema["items"])


def _inference_pool_errors(obj: dict[str, Any]) -> list[str]:
    """What the API server would refuse in this InferencePool, as messages ([] when none)."""
    group, version = obj["apiVersion"].split("/")
    crd = yaml.safe_load(CRD.read_text())
    assert (group, obj["kind"]) == (crd["spec"]["group"], crd["spec"]["names"]["kind"])
    served = _crd_version(version)
    assert served["served"], version
    schema = served["schema"]["openAPIV3Schema"]
    validator = jsonschema.Draft7Validator(_structural(schema))
    errors = [
        f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in validator.iter_errors(obj)
    ]
    if errors:  # as the API server: CEL runs only on a value of the right shape
        return errors
    return [
        message
        for rule, message, value in _cel_checks(_defaulted(obj, schema), schema)
        if not CEL_RULES[rule](value)
    ]


def test_the_inference_pool_validates_against_the_crd(rendered: Rendered) -> None:
    assert _inference_pool_errors(_pool(rendered)) == []


def _misspell_failure_mode(spec: dict[str, Any]) -> None:
    spec["endpointPickerRef"]["failurMode"] = spec["endpointPickerRef"].pop("failureMode")


def _misspell_target_ports(spec: dict[str, Any]) -> None:
    spec["targetPort"] = spec.pop("targetPorts")


def _drop_picker_port(spec: dict[str, Any]) -> None:
    del spec["endpointPickerRef"]["port"]


def _drop_picker_port_and_kind(spec: dict[str, Any]) -> None:
    del spec["endpointPickerRef"]["port"], spec["endpointPickerRef"]["kind"]


def _bad_failure_mode(spec: dict[str, Any]) -> None:
    spec["endpointPickerRef"]["failureMode"] = "FailOpn"


def _repeat_target_port(spec: dict[str, Any]) -> None:
    spec["targetPorts"] = spec["targetPorts"] * 2


def _port_zero(spec: dict[str, Any]) -> None:
    spec["endpointPickerRef"]["port"]["number"] = 0


@pytest.mark.parametrize(
    ("break_it", "refused_for"),
    [
        pytest.param(_misspell_failure_mode, "'failurMode' was unexpected", id="misspelt-field"),
        pytest.param(_misspell_target_ports, "'targetPort' was unexpected", id="misspelt-list"),
        pytest.param(_misspell_target_ports, "'targetPorts' is a required", id="missing-list"),
        pytest.param(_drop_picker_port, "port is required when kind", id="no-picker-port"),
        # kind defaults to Service: the rule still applies.
        pytest.param(
            _drop_picker_port_and_kind, "port is required when kind", id="no-kind-no-port"
        ),
        pytest.param(_bad_failure_mode, "'FailOpn' is not one of", id="unknown-failure-mode"),
        pytest.param(_repeat_target_port, "port number must be unique", id="repeated-port"),
        pytest.param(_port_zero, "0 is less than the minimum of 1", id="port-zero"),
    ],
)
def test_the_crd_validation_refuses_a_broken_pool(
    rendered: Rendered, break_it: Callable[[dict[str, Any]], None], refused_for: str
) -> None:
    broken = copy.deepcopy(_pool(rendered))
    break_it(broken["spec"])
    errors = _inference_pool_errors(broken)
    assert any(refused_for in e for e in errors), errors


def test_every_cel_rule_of_the_crd_is_checked() -> None:
    schema = _crd_version("v1")["schema"]["openAPIV3Schema"]

    def rules(node: dict[str, Any]) -> Iterator[str]:
        yield from (check["rule"] for check in node.get("x-kubernetes-validations", []))
        for child in [*node.get("properties", {}).values(), node.get("items")]:
            if isinstance(child, dict):
                yield from rules(child)

    assert set(rules(schema)) == set(CEL_RULES)


def test_the_httproute_sends_the_api_to_the_inference_pool(rendered: Rendered) -> None:
    """Checked by hand (the Gateway API's schemas are not vendored)."""
    [route] = rendered.of_kind("HTTPRoute")
    pool = _pool(rendered)
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert set(route) == {"apiVersion", "kind", "metadata", "spec"}
    assert set(route["spec"]) <= {"parentRefs", "hostnames", "rules"}
    for parent in route["spec"]["parentRefs"]:
        assert set(parent) <= {"group", "kind", "name", "namespace", "sectionName", "port"}
        assert (parent.get("group"), parent.get("kind")) == ("gateway.networking.k8s.io", "Gateway")
    [rule] = route["spec"]["rules"]
    assert set(rule) <= {"name", "matches", "filters", "backendRefs", "timeouts"}
    [backend] = rule["backendRefs"]
    assert backend == {
        "group": "inference.networking.k8s.io",
        "kind": "InferencePool",
        "name": pool["metadata"]["name"],
    }


# -- the pool and the engines ---------------------------------------------------------------


def _named_port(deployment: dict[str, Any], port: int | str) -> int:
    """The container port a Service's targetPort (a number or a name) reaches."""
    if isinstance(port, int):
        return port
    [number] = [p["containerPort"] for p in container(deployment)["ports"] if p["name"] == port]
    return int(number)


def _pods_of(rendered: Rendered, selector: dict[str, str]) -> list[dict[str, Any]]:
    return [
        d
        for d in rendered.of_kind("Deployment")
        if selects(selector, d["spec"]["template"]["metadata"]["labels"])
    ]


def test_the_pool_selects_the_engine_pods_on_their_port(rendered: Rendered) -> None:
    spec = _pool(rendered)["spec"]
    selected = _pods_of(rendered, spec["selector"]["matchLabels"])
    assert sorted(map(_key, selected)) == sorted(map(_key, rendered.engines()))
    target_ports = {p["number"] for p in spec["targetPorts"]}
    for engine in rendered.engines():
        assert {p["containerPort"] for p in container(engine)["ports"]} == target_ports


def _picker_policy(rendered: Rendered) -> Policy:
    config_map = rendered.get("ConfigMap", "specroute-epp-policy")
    return parse_policy(config_map["data"]["policy.yaml"], "ConfigMap specroute-epp-policy")


def test_the_picker_discovers_the_pools_members_on_its_target_port(rendered: Rendered) -> None:
    """The picker's backends are the pods the InferencePool selects, on its target port: the
    ip:port it answers is a member of the pool."""
    policy = _picker_policy(rendered)
    assert policy.backends == [] and policy.discovery is not None
    source = policy.discovery.kubernetes
    spec = _pool(rendered)["spec"]
    assert source.selector.matchLabels == spec["selector"]["matchLabels"]
    assert source.port in {p["number"] for p in spec["targetPorts"]}
    assert source.namespace in (None, rendered.namespace)  # None: the picker's own
    assert source.api_url is None  # in-cluster


def _engine_pod(engine: dict[str, Any], ip: str) -> Pod:
    """A ready pod of an engine Deployment, as the API would list it."""
    metadata = engine["spec"]["template"]["metadata"]
    return Pod(f"{engine['metadata']['name']}-6c9f7-x2x4q", ip, True, False, metadata["labels"])


def test_the_discovered_engines_are_the_backends_the_gateway_names(rendered: Rendered) -> None:
    """One engine, routed alike by both faces: each engine pod becomes, in the picker, the
    backend the gateway's policy has for the engine's pool (model, engine, speculation)."""
    picker = _picker_policy(rendered)
    assert picker.discovery is not None
    gateway = {b.pool: b for b in parse_policy(rendered.policy_text).backends}
    pods = [_engine_pod(e, f"10.1.0.{i}") for i, e in enumerate(rendered.engines(), start=1)]
    for pod in pods:
        found = backend_for(pod, picker.discovery)
        assert found.url == f"http://{pod.ip}:{picker.discovery.kubernetes.port}"
        known = gateway[found.pool]
        assert (found.model, found.engine, found.speculation, found.draft_version) == (
            known.model,
            known.engine,
            known.speculation,
            known.draft_version,
        ), found.pool
    expanded = with_pods(picker, pods)  # the whole policy, as the picker would put in force
    assert expanded.pool_names() == sorted(gateway)
    assert expanded.shadow.reference_pool in expanded.pool_names()


# -- the picker -----------------------------------------------------------------------------


def _environ(rendered: Rendered, deployment: dict[str, Any]) -> dict[str, str]:
    """A container's environment as the kubelet would build it (Secret values as placeholders)."""
    secret = rendered.generated("Secret", "specroute-secrets")
    environ: dict[str, str] = {}
    for var in container(deployment)["env"]:
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


def _epp_parser() -> argparse.ArgumentParser:
    """`specroute epp`'s flags: EPP_FLAGS, each taking one value."""
    parser = argparse.ArgumentParser(prog="specroute epp")
    for flag, setting in EPP_FLAGS.items():
        parser.add_argument(flag, dest=setting)
    return parser


def _cli_epp() -> argparse.ArgumentParser | None:
    """The CLI's own `epp` subcommand, once it has one."""
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices.get("epp")
    return None


def _picker_settings(rendered: Rendered) -> Settings:
    picker = container(rendered.get("Deployment", PICKER))
    assert picker["command"] == ["specroute", "epp"]
    args = vars(_epp_parser().parse_args(picker["args"]))
    return Settings.from_env(args, environ=_environ(rendered, rendered.get("Deployment", PICKER)))


def test_the_picker_arguments_are_what_specroute_epp_takes(rendered: Rendered) -> None:
    args = container(rendered.get("Deployment", PICKER))["args"]
    flags = [a for a in args if a.startswith("-")]
    assert set(flags) <= set(EPP_FLAGS), set(flags) - set(EPP_FLAGS)
    assert len(flags) == len(set(flags)) == len(args) / 2
    cli = _cli_epp()
    if cli is not None:  # the command exists: it takes the same flags, and these arguments
        known = {s for a in cli._actions for s in a.option_strings}
        assert set(EPP_FLAGS) <= known, set(EPP_FLAGS) - known
        cli.parse_args(args)


def test_the_picker_environment_and_arguments_are_its_settings(rendered: Rendered) -> None:
    picker = rendered.get("Deployment", PICKER)
    environ = _environ(rendered, picker)
    fields = {ENV_PREFIX + name.upper() for name in Settings.model_fields}
    ours = {name for name in environ if name.startswith(ENV_PREFIX)}
    assert ours <= fields, ours - fields
    settings = _picker_settings(rendered)
    ports = {p["name"]: p["containerPort"] for p in container(picker)["ports"]}
    assert ports == {
        "grpc": settings.grpc_port,
        "grpc-health": settings.health_port,
        "http": settings.port,
    }
    assert (settings.grpc_port, settings.health_port, settings.port) == (9002, 9003, 9090)
    assert settings.host == "0.0.0.0"
    assert settings.grpc_tls == "self-signed"


def test_the_picker_shares_the_gateways_secrets_redis_server_and_image(
    rendered: Rendered,
) -> None:
    picker = rendered.get("Deployment", PICKER)
    gateway = rendered.get("Deployment", GATEWAY)
    assert container(picker)["image"] == container(gateway)["image"]
    settings = _picker_settings(rendered)
    gateway_environ = _environ(rendered, gateway)
    # The same Redis, another database: replicas adopt the policy stored in theirs, and the
    # picker's (discovery) is not the gateway's.
    ours, theirs = (
        urlsplit(settings.redis_url or ""),
        urlsplit(gateway_environ["SPECROUTE_REDIS_URL"]),
    )
    assert ours._replace(path="") == theirs._replace(path="")
    assert ours.path != theirs.path
    assert settings.admin_token == gateway_environ["SPECROUTE_ADMIN_TOKEN"]
    assert urlsplit(settings.redis_url or "").hostname in {
        s["metadata"]["name"] for s in rendered.of_kind("Service")
    }

    def policy_mount(deployment: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
        [mount] = [
            m for m in container(deployment)["volumeMounts"] if volumes[m["name"]].get("configMap")
        ]
        return mount, volumes[mount["name"]]

    mount, volume = policy_mount(picker)
    assert mount["mountPath"] == policy_mount(gateway)[0]["mountPath"]
    assert volume["configMap"]["name"] == "specroute-epp-policy"
    assert settings.policy_path == Path(mount["mountPath"]) / "policy.yaml"


def test_the_picker_may_list_and_watch_pods_and_nothing_more(rendered: Rendered) -> None:
    deployment = rendered.get("Deployment", PICKER)
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    [binding] = [
        b
        for b in rendered.of_kind("RoleBinding")
        if {"kind": "ServiceAccount", "name": account, "namespace": rendered.namespace}
        in b["subjects"]
    ]
    assert binding["roleRef"]["kind"] == "Role"
    assert not rendered.of_kind("ClusterRoleBinding")
    role = rendered.get("Role", binding["roleRef"]["name"])
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    ]
    # Not automounted (test_the_picker_runs_hardened_as_the_gateway): the token, CA and
    # namespace projected where discovery reads them, into the picker's container alone.
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    [mount] = [
        m for m in container(deployment)["volumeMounts"] if m["mountPath"] == str(SERVICE_ACCOUNT)
    ]
    assert mount["readOnly"] is True
    sources = volumes[mount["name"]]["projected"]["sources"]
    paths = {
        item["path"]
        for source in sources
        for item in (
            [source["serviceAccountToken"]]
            if "serviceAccountToken" in source
            else next(iter(source.values()))["items"]
        )
    }
    assert paths == {"token", "ca.crt", "namespace"}


def test_the_picker_probes_are_the_grpc_health_services(rendered: Rendered) -> None:
    picker = container(rendered.get("Deployment", PICKER))
    settings = _picker_settings(rendered)
    probes = {k: picker[k] for k in ("startupProbe", "livenessProbe", "readinessProbe")}
    for probe in probes.values():
        assert set(probe) & {"grpc", "httpGet", "tcpSocket", "exec"} == {"grpc"}
        assert probe["grpc"]["port"] == settings.health_port
        assert probe["grpc"]["service"] in HEALTH_SERVICES
    assert probes["livenessProbe"]["grpc"]["service"] == "liveness"
    assert probes["readinessProbe"]["grpc"]["service"] == "readiness"


def test_the_picker_runs_hardened_as_the_gateway(rendered: Rendered) -> None:
    deployment = rendered.get("Deployment", PICKER)
    gateway = rendered.get("Deployment", GATEWAY)
    pod = deployment["spec"]["template"]["spec"]
    picker = container(deployment)
    assert pod["securityContext"] == gateway["spec"]["template"]["spec"]["securityContext"]
    assert picker["securityContext"] == container(gateway)["securityContext"]
    assert pod["automountServiceAccountToken"] is False
    account = rendered.get("ServiceAccount", pod["serviceAccountName"])
    assert account["automountServiceAccountToken"] is False
    assert picker["resources"]["requests"]["cpu"] and picker["resources"]["limits"]["memory"]
    assert "cpu" not in picker["resources"]["limits"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    [budget] = [
        b
        for b in rendered.of_kind("PodDisruptionBudget")
        if selects(b["spec"]["selector"]["matchLabels"], labels)
    ]
    assert budget["spec"]["maxUnavailable"] == 1
    assert deployment["spec"]["replicas"] >= 2


def test_the_endpoint_picker_ref_reaches_the_pickers_grpc_port(rendered: Rendered) -> None:
    ref = _pool(rendered)["spec"]["endpointPickerRef"]
    assert ref.get("kind", "Service") == "Service" and ref.get("group", "") == ""
    assert ref["failureMode"] == "FailClose"
    service = rendered.get("Service", ref["name"])
    assert [_key(d) for d in _pods_of(rendered, service["spec"]["selector"])] == [
        ("Deployment", PICKER)
    ]
    [port] = [p for p in service["spec"]["ports"] if p["port"] == ref["port"]["number"]]
    assert port["appProtocol"] == "http2"  # gRPC over TLS, as the reference picker's Service
    picker = rendered.get("Deployment", PICKER)
    assert _named_port(picker, port["targetPort"]) == _picker_settings(rendered).grpc_port == 9002
    served = {p["port"] for p in service["spec"]["ports"]}
    assert served == {9002, 9003, 9090}


# -- who reaches whom -----------------------------------------------------------------------


@dataclass(frozen=True)
class Peer:
    """A pod that opens a connection: its labels, namespace and namespace's labels."""

    labels: dict[str, str]
    namespace: str
    namespace_labels: dict[str, str] = field(default_factory=dict)

    def in_namespace(self) -> dict[str, str]:
        return {"kubernetes.io/metadata.name": self.namespace} | self.namespace_labels


def _admits(rendered: Rendered, target: dict[str, str], port: int, source: Peer) -> bool:
    """Whether the render's NetworkPolicies let ``source`` reach ``target``'s pods on ``port``
    (ingress only: egress is open), with the API's semantics for the selectors used here."""
    namespace = rendered.namespace
    policies = [
        p
        for p in rendered.of_kind("NetworkPolicy")
        if "Ingress" in p["spec"]["policyTypes"]
        and selects(p["spec"]["podSelector"].get("matchLabels", {}), target)
    ]
    if not policies:
        return True
    for policy in policies:
        for rule in policy["spec"].get("ingress", []):
            if "ports" in rule and port not in {p["port"] for p in rule["ports"]}:
                continue
            for peer in rule.get("from", [{"namespaceSelector": {}}]):
                assert set(peer) <= {"podSelector", "namespaceSelector"}, peer
                if "namespaceSelector" in peer:
                    namespace_ok = selects(
                        peer["namespaceSelector"].get("matchLabels", {}), source.in_namespace()
                    )
                else:
                    namespace_ok = source.namespace == namespace
                pod_ok = selects(peer.get("podSelector", {}).get("matchLabels", {}), source.labels)
                if namespace_ok and pod_ok:
                    return True
    return False


def test_the_network_policies_let_in_what_the_picker_needs_and_no_more(
    rendered: Rendered,
) -> None:
    namespace = rendered.namespace

    def labels(name: str) -> dict[str, str]:
        return dict(rendered.get("Deployment", name)["spec"]["template"]["metadata"]["labels"])

    picker = Peer(labels(PICKER), namespace)
    gateway = Peer(labels(GATEWAY), namespace)
    dataplane = [  # the Envoy pods: labelled in this namespace, or in a labelled namespace
        Peer({"specroute.io/dataplane": "true"}, namespace),
        Peer(
            {"app.kubernetes.io/name": "envoy"},
            "envoy-gateway-system",
            {"specroute.io/dataplane": "true"},
        ),
    ]
    strangers = [
        Peer({"app": "other"}, namespace),
        Peer({"specroute.io/dataplane": "true"}, "default"),
        Peer({"app": "ingress"}, "ingress-nginx", {"specroute.io/client": "true"}),
    ]
    prometheus = Peer({"app.kubernetes.io/name": "prometheus"}, "monitoring")
    redis = labels("redis")
    epp = labels(PICKER)

    for engine in rendered.engines():
        pod = engine["spec"]["template"]["metadata"]["labels"]
        assert _admits(rendered, pod, 8000, picker)
        assert _admits(rendered, pod, 8000, gateway)
        assert all(_admits(rendered, pod, 8000, d) for d in dataplane)
        assert not any(_admits(rendered, pod, 8000, s) for s in strangers)
    assert _admits(rendered, redis, 6379, picker)
    assert _admits(rendered, redis, 6379, gateway)
    assert not any(_admits(rendered, redis, 6379, d) for d in dataplane)
    assert all(_admits(rendered, epp, 9002, d) for d in dataplane)
    assert not any(_admits(rendered, epp, 9002, s) for s in [*strangers, prometheus])
    assert _admits(rendered, epp, 9090, prometheus)
    assert not any(_admits(rendered, epp, 9090, p) for p in [*dataplane, *strangers])
