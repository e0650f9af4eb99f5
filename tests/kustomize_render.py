"""Kustomize overlays rendered into objects, for the deployment tests (integration and e2e)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
OVERLAYS = sorted(
    p
    for p in (REPO / "deploy/kubernetes/overlays").iterdir()
    if (p / "kustomization.yaml").exists()
)


def kustomize(directory: Path) -> list[dict[str, Any]]:
    if shutil.which("kubectl"):
        command = ["kubectl", "kustomize", str(directory)]
    elif shutil.which("kustomize"):
        command = ["kustomize", "build", str(directory)]
    else:
        raise AssertionError(
            "neither kubectl nor kustomize is installed (scripts/test.sh installs kubectl)"
        )
    out = subprocess.run(command, check=True, capture_output=True, text=True, timeout=60).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


@dataclass
class Rendered:
    overlay: Path
    objects: list[dict[str, Any]]

    @cached_property
    def namespace(self) -> str:
        [namespace] = self.of_kind("Namespace")
        return str(namespace["metadata"]["name"])

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def get(self, kind: str, name: str) -> dict[str, Any]:
        [found] = [o for o in self.of_kind(kind) if o["metadata"]["name"] == name]
        return found

    def generated(self, kind: str, prefix: str) -> dict[str, Any]:
        """A generated ConfigMap/Secret by its name before kustomize appended the hash."""
        [found] = [
            o
            for o in self.of_kind(kind)
            if o["metadata"]["name"] == prefix or o["metadata"]["name"].startswith(prefix + "-")
        ]
        return found

    def engines(self) -> list[dict[str, Any]]:
        return [
            d
            for d in self.of_kind("Deployment")
            if d["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component")
            == "engine"
        ]

    @cached_property
    def policy_text(self) -> str:
        return str(self.get("ConfigMap", "specroute-policy")["data"]["policy.yaml"])


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])
