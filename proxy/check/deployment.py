"""Cross-check a policy with the launch configs of the engines it routes to, offline.

Each check catches a mistake that passes both the policy schema and the engine's own
start-up, or one that only shows on the GPU node minutes into a rollout:

- what the engine's own parser or schema would refuse, as far as it can be run here
  (``vllm_launch``, ``sglang_launch``, ``trtllm_launch`` say how far, and from which
  version), and the metrics the gateway scrapes being served;
- the policy's speculation method and ``k`` against the engine's speculative settings (the
  acceptance scorer and the break-even scorer trust the policy);
- the model name clients ask for against the name the engine serves, and the port of the
  backend's URL against the port the engine listens on;
- the draft's vocabulary and tokenizer against the target's, from local model directories;
- the shadow reference pool really without speculation, so a shadow verdict compares
  speculative output with plain output.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from proxy.check.launch import LaunchConfig, LaunchConfigError, Level
from proxy.check.models import ModelFacts, ModelResolver, read_model
from proxy.check.readers import load_launch_config
from proxy.policy import BackendSpec, Policy

# Methods whose drafter is a separate checkpoint with its own config.json.
_DRAFT_CHECKPOINT = frozenset({"draft_model", "eagle", "eagle3"})


@dataclass(frozen=True, slots=True)
class Finding:
    level: Level
    backend: str
    message: str

    def __str__(self) -> str:
        where = f"backend {self.backend}: " if self.backend else ""
        return f"{self.level}: {where}{self.message}"


@dataclass(slots=True)
class CheckReport:
    findings: list[Finding] = field(default_factory=list)
    engines_checked: int = 0

    @property
    def ok(self) -> bool:
        return not any(f.level == "error" for f in self.findings)


def _check_speculation(backend: BackendSpec, launch: LaunchConfig, reference: bool) -> list[str]:
    spec, wanted = launch.speculative, backend.speculation
    if not wanted.enabled:
        if spec is None:
            return []
        why = (
            " and its pool is the shadow reference: verdicts would compare speculative "
            "output with speculative output"
            if reference
            else ""
        )
        return [f"the policy says no speculation, the engine drafts ({spec.engine_method}){why}"]
    if spec is None:
        return [f"the policy says {wanted.method}, the engine does not speculate"]
    if spec.engine_method is None:
        return ["speculative-config has no method: vLLM would guess it from the checkpoint"]
    problems = []
    if spec.method != wanted.method:
        problems.append(f"the policy says {wanted.method}, the engine runs {spec.engine_method}")
    if spec.k is None:
        problems.append(f"draft tokens per step not set ({spec.k_source}): the engine would choose")
    elif wanted.k != spec.k:
        problems.append(
            f"the policy's k={wanted.k} but the engine drafts {spec.k} per step ({spec.k_source})"
        )
    draft_tp = spec.draft_tensor_parallel_size
    if draft_tp is not None and draft_tp not in (1, launch.tensor_parallel_size):
        problems.append(
            f"draft_tensor_parallel_size={draft_tp} must be 1 or the engine's "
            f"tensor-parallel-size ({launch.tensor_parallel_size})"
        )
    return problems


def _check_port(backend: BackendSpec, launch: LaunchConfig) -> list[Finding]:
    try:
        url_port = urlsplit(backend.url).port
    except ValueError:
        return []
    if url_port is None or launch.port is None or url_port == launch.port:
        return []
    message = (
        f"the backend's url says port {url_port}, the launch config {launch.port}: the "
        "engine listens on the url's port only if its command line overrides the file"
    )
    return [Finding("warning", "", message)]


def _compare_vocab(method: str, target: ModelFacts, draft: ModelFacts, hetero: bool) -> list[str]:
    if target.vocab_size is None:
        return [f"{target.path}/config.json has no vocab_size"]
    problems = []
    if draft.vocab_size != target.vocab_size and not hetero:
        problems.append(
            f"draft vocab_size {draft.vocab_size} ({draft.path}) differs from the target's "
            f"{target.vocab_size} ({target.path}): its token ids mean other tokens"
        )
    if draft.draft_vocab_size is not None and draft.draft_vocab_size > target.vocab_size:
        problems.append(
            f"draft_vocab_size {draft.draft_vocab_size} exceeds the target's vocab_size "
            f"{target.vocab_size}"
        )
    both = target.tokenizer_digest is not None and draft.tokenizer_digest is not None
    if (
        method == "draft_model"
        and both
        and not hetero
        and (target.tokenizer_digest != draft.tokenizer_digest)
    ):
        problems.append(
            f"the draft's tokenizer ({draft.path}) is not the target's ({target.path}): "
            "vLLM feeds the draft the target's token ids"
        )
    return problems


def _check_draft_vocab(launch: LaunchConfig, resolver: ModelResolver) -> list[Finding]:
    spec = launch.speculative
    if spec is None or spec.model is None or spec.method is None:
        return []
    if spec.method not in _DRAFT_CHECKPOINT:
        return []
    if launch.model is None:
        return [Finding("warning", "", "draft vocabulary not checked: no model in the config")]
    here = launch.path.parent
    target_path = resolver.resolve(launch.model, here)
    draft_path = resolver.resolve(spec.model, here)
    if target_path is None or draft_path is None:
        pairs = ((launch.model, target_path), (spec.model, draft_path))
        missing = ", ".join(name for name, path in pairs if path is None)
        message = (
            f"draft vocabulary not checked: {missing} not found locally "
            "(pass --models DIR: a download directory or a Hugging Face cache)"
        )
        return [Finding("warning", "", message)]
    try:
        target, draft = read_model(target_path), read_model(draft_path)
    except ValueError as exc:
        return [Finding("error", "", str(exc))]
    problems = _compare_vocab(spec.method, target, draft, spec.heterogeneous_vocab)
    return [Finding("error", "", p) for p in problems]


def _check_backend(
    backend: BackendSpec, launch: LaunchConfig, reference: bool, resolver: ModelResolver
) -> list[Finding]:
    found = [Finding(issue.level, "", issue.message) for issue in launch.issues]
    found += [Finding("error", "", p) for p in _check_speculation(backend, launch, reference)]
    if backend.model not in launch.served_as():
        served = ", ".join(launch.served_as()) or "nothing named"
        message = f"clients ask for {backend.model!r}, the engine serves {served}"
        found.append(Finding("error", "", message))
    found += _check_port(backend, launch) + _check_draft_vocab(launch, resolver)
    where = f"{launch.path}: "
    return [Finding(f.level, backend.name, where + f.message) for f in found]


def check_deployment(policy: Policy, policy_path: Path, resolver: ModelResolver) -> CheckReport:
    """Every finding for ``policy`` (read from ``policy_path``) and its engines' launch configs."""
    report = CheckReport()
    reference = policy.shadow.reference_pool
    for backend in policy.backends:
        if backend.launch_config is None:
            note = "no launch_config: the engine is not cross-checked"
            if backend.pool == reference:
                note += " (nothing shows the shadow reference pool is really plain)"
            report.findings.append(Finding("warning", backend.name, note))
            continue
        try:
            # normpath: report 'deploy/vllm/...', not 'overlays/x/../../../vllm/...'.
            launch_path = Path(os.path.normpath(policy_path.parent / backend.launch_config))
            launch = load_launch_config(launch_path, backend.engine)
        except LaunchConfigError as exc:
            report.findings.append(Finding("error", backend.name, str(exc)))
            continue
        report.engines_checked += 1
        is_reference = backend.pool == reference
        report.findings += _check_backend(backend, launch, is_reference, resolver)
    return report
