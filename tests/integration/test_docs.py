"""The manual in docs/: its generated pages match the code, every alert has its playbook, the
kustomize component's runbook base is a working knob, and the README stays a short door.

`mkdocs build --strict` itself (broken links, anchors, images, pages left out of the nav) runs
in scripts/test.sh, beside ruff and mypy. The promtool unit tests of the rules, with their
runbook_url annotations, are tests/integration/test_prometheus.py's.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from proxy import docs

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "specroute-alerts.yaml"
MONITORING = ROOT / "deploy" / "kubernetes" / "components" / "monitoring"
PLAYBOOK_HEADINGS = ["## Meaning", "## Impact", "## Diagnosis", "## Mitigation"]


def alert_rules(groups: list[dict[str, object]]) -> list[dict[str, object]]:
    return [r for g in groups for r in g["rules"] if "alert" in r]  # type: ignore[attr-defined]


def playbook_of(url: str) -> Path:
    """The page a runbook_url names: <base>/playbooks/alerts/<slug>/ -> docs/.../<slug>.md."""
    path = urlparse(url).path
    assert "/playbooks/" in path, url
    tail = path[path.index("/playbooks/") + 1 :].strip("/")
    return ROOT / "docs" / f"{tail}.md"


def test_generated_reference_pages_match_the_code() -> None:
    files = docs.generate(ROOT)
    assert {p.name for p in files} >= {"cli.md", "policy.md", "settings.md", "metrics.md"}
    outdated = docs.stale(ROOT, files)
    assert not outdated, (
        f"stale generated pages {[str(p) for p in outdated]}: regenerate with "
        f"`.venv/bin/{docs.REGENERATE}` and commit them"
    )


def test_every_alert_links_its_playbook_page() -> None:
    rules = alert_rules(yaml.safe_load(RULES.read_text())["groups"])
    assert rules
    nav = (ROOT / "mkdocs.yml").read_text()
    for rule in rules:
        url = rule["annotations"]["runbook_url"]  # type: ignore[index]
        page = playbook_of(url)
        assert page.is_file(), f"{rule['alert']}: no playbook at {page.relative_to(ROOT)}"
        text = page.read_text()
        assert text.startswith(f"# {rule['alert']}\n"), page
        positions = [text.find(h + "\n") for h in PLAYBOOK_HEADINGS]
        assert -1 not in positions and positions == sorted(positions), page
        assert str(page.relative_to(ROOT / "docs")) in nav, f"{page} is not in mkdocs.yml's nav"


def test_situation_playbooks_have_the_four_headings() -> None:
    pages = [p for p in (ROOT / "docs" / "playbooks").glob("*.md") if p.name != "index.md"]
    assert len(pages) >= 8
    for page in pages:
        text = page.read_text()
        positions = [text.find(h + "\n") for h in PLAYBOOK_HEADINGS]
        assert -1 not in positions and positions == sorted(positions), page


def test_runbook_base_is_set_in_the_monitoring_component(tmp_path: Path) -> None:
    """Changing the component's one literal moves every rendered runbook_url; nothing of the
    knob itself reaches the cluster."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is missing: scripts/test.sh installs it into .venv/bin")
    component = tmp_path / "monitoring"
    shutil.copytree(MONITORING, component)
    knob = component / "kustomization.yaml"
    text = knob.read_text()
    assert text.count("base=http://127.0.0.1:8000") == 1
    knob.write_text(text.replace("base=http://127.0.0.1:8000", "base=https://runbooks.test/m"))
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "components: [monitoring]\n"
    )
    out = subprocess.run(
        [kubectl, "kustomize", str(tmp_path)], capture_output=True, text=True, check=True
    ).stdout
    docs_ = list(yaml.safe_load_all(out))
    assert not [d for d in docs_ if d["kind"] == "ConfigMap"]
    (rule,) = [d for d in docs_ if d["kind"] == "PrometheusRule"]
    urls = [r["annotations"]["runbook_url"] for r in alert_rules(rule["spec"]["groups"])]
    assert len(urls) == len(alert_rules(yaml.safe_load(RULES.read_text())["groups"]))
    for url in urls:
        assert url.startswith("https://runbooks.test/m/playbooks/alerts/"), url
        assert playbook_of(url).is_file(), url


def test_readme_is_a_short_door_whose_links_and_commands_hold() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme) <= 8000, len(readme)
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert any(t.startswith("docs/") for t in targets)
    for target in targets:
        if "://" in target:
            continue
        assert (ROOT / target).exists(), f"README.md links {target}, which does not exist"
    makefile = (ROOT / "Makefile").read_text()
    for target in [*re.findall(r"^make (\w[\w-]*)", readme, flags=re.MULTILINE), "docs"]:
        assert re.search(rf"^{target}:", makefile, flags=re.MULTILINE), f"make {target}"
