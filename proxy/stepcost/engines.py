"""Each serving engine's step-cost profile: vLLM's is the calibration; SGLang's and
TensorRT-LLM's are derived from it where the engines' own sources say they differ.

The calibration (``default_profile.json``) times the target's forward steps and an
EAGLE-like draft head on one H200 with CUDA-graph replay and no scheduler or host time.
vLLM's profile is that calibration as measured. The two others change only what their
sources name, each by a named constant with its source below; where no figure is published
the constant says so and is set to change nothing. The same derivation applies over a GPU
estimate (``hardware.py``): pass its data as ``base``.

SGLang (sgl-project/sglang):

- EAGLE-3's default tree. Without ``--speculative-num-steps/--speculative-eagle-topk/
  --speculative-num-draft-tokens``, a ``LlamaForCausalLM`` target gets (5, 4, 8), most other
  architectures (3, 1, 4) (``_auto_choose_speculative_params``,
  ``python/sglang/srt/arg_groups/speculative_hook.py`` at 004c82e07d87). The calibration is
  Llama-3.1-8B-shaped, so the profile drafts 5 deep, 4 candidates wide, and verifies 8 tokens
  per sequence (:data:`SGLANG_EAGLE_TREE`).
- How that step runs: ``EagleDraftWorker.draft_forward`` runs num_steps - 1 draft forwards
  over batch x topk tokens (the last step only selects), after one draft extend over the
  num_steps + 1 tokens per request of the last verification (``_draft_extend_for_decode``);
  the verify forward checks num_draft_tokens per request
  (``python/sglang/srt/speculative/eagle_worker_v2.py`` at 006b0e3d317f). Costed by
  ``StepCostModel.spec_step_ms``.
- The tree's acceptance. More than one candidate per depth "will lead to higher acceptance
  rate" (SGLang's speculative decoding docs), but neither those docs nor the EAGLE papers
  give a figure for this shape against a chain: :data:`TREE_ACCEPTANCE_GAIN` is 1, the
  chain's per-token acceptance is kept, and the simulated tree pays for its wider verify
  without its gain (a pessimistic SGLang; override ``acceptance`` with ``--profile``).
- Running requests. Without ``--max-running-requests``, speculative decoding caps the batch
  at 48 (``_handle_eagle_family`` and ``_handle_ngram``, same file as above):
  :data:`SGLANG_SPEC_MAX_RUNNING`.
- Prefill beside decodes. ``enable_mixed_chunk`` is off by default (``ServerArgs``) and forced
  off for EAGLE (``_handle_eagle_family``), and the scheduler runs a new prefill batch before
  the running one (``Scheduler.get_next_batch_to_run``, ``python/sglang/srt/managers/
  scheduler.py`` at v0.5.9): a step with prompt chunks waiting prefills only, and the
  running decodes wait for it (``mixed_prefill`` False).
- Overlap scheduler. On, speculative decoding included: the speculative worker is always the
  overlapping V2 one and only ``--disable-overlap-schedule`` turns it off
  (``handle_speculative_decoding``, same file): no host time, as in the calibration.

TensorRT-LLM (NVIDIA/TensorRT-LLM, the PyTorch backend ``trtllm-serve`` runs):

- Overlap scheduler. On by default (``docs/source/torch/features/overlap_scheduler.md`` at
  8237b7d6a969), but ``create_py_executor`` turns it off for a speculation mode whose
  ``support_overlap_scheduler()`` is False
  (``tensorrt_llm/_torch/pyexecutor/py_executor_creator.py`` at bab0f2e6eea1), and NGRAM is
  not among the modes that support it (``tensorrt_llm/_torch/speculative/interface.py`` at
  00b6d5a25c30); its drafter is a Python pool lookup per request on the host
  (``NGramPoolManager.get_draft_tokens``, ``tensorrt_llm/_torch/speculative/ngram.py`` at
  024997657505). TensorRT-LLM gives no figure for what the overlap saves; SGLang's v0.4
  release (lmsys.org/blog/2024-12-04-sglang-v0-4, the reference of TensorRT-LLM's own
  overlap page) measured 1.1x throughput from the same technique. So n-gram steps take
  :data:`NO_OVERLAP_HOST_SHARE` (0.10) of their GPU time longer; plain steps keep the overlap.
- CUDA graphs. On by default, and captured for batches of decoding requests only, so a
  step carrying prefill runs eagerly (``TorchLlmArgs.cuda_graph_config``, its default and
  field description in ``tensorrt_llm/llmapi/llm_args.py`` as read in two versions whose
  commits the reading did not pin). No published figure for that eager cost: not modelled.
- Draft length. An explicit ``NGramDecodingConfig`` has no default ``max_draft_len``; the
  engine's own automatic choice is 3 above batch 4 (``suggest_spec_config``,
  ``tensorrt_llm/_torch/speculative/auto_heuristic.py`` at 7274a594b8aa), which the
  benchmarks' mixed fleet uses.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

from proxy.stepcost.profile import EngineProfile, SpecShape, default_profile_data

EngineName = Literal["vllm", "sglang", "trtllm"]
ENGINES: tuple[EngineName, ...] = ("vllm", "sglang", "trtllm")

# SGLang's default EAGLE tree for Llama-architecture targets (steps, topk, num_draft_tokens).
SGLANG_EAGLE_TREE = SpecShape(steps=5, topk=4, verify_tokens=8)
# SGLang's cap on running requests under speculative decoding, when none is configured.
SGLANG_SPEC_MAX_RUNNING = 48
# The tree's per-token acceptance over the chain's: no published figure, so none assumed.
TREE_ACCEPTANCE_GAIN = 1.0
# Host time a step adds when the engine does not overlap it with the GPU, as a share of the
# step's GPU time (SGLang v0.4: 1.1x throughput from overlapping it).
NO_OVERLAP_HOST_SHARE = 0.10


def engine_profile_data(engine: str, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """``engine``'s profile data: ``base`` (the calibration if None) with the engine's
    differences (see the module docstring)."""
    data = copy.deepcopy(base) if base is not None else default_profile_data()
    if engine == "vllm":
        return data
    if engine == "sglang":
        data["spec_shape"] = {"eagle3": SGLANG_EAGLE_TREE.model_dump()}
        data["max_running_requests"] = dict.fromkeys(
            ("eagle3", "ngram", "draft_model"), SGLANG_SPEC_MAX_RUNNING
        )
        data["mixed_prefill"] = False
        data["acceptance"] = _scaled_acceptance(data, "eagle3", TREE_ACCEPTANCE_GAIN)
        what = (
            "EAGLE-3 drafted as SGLang's default Llama tree (5 deep, top-4, 8 verified), "
            "at most 48 running requests when speculating, no prefill beside decodes"
        )
    elif engine == "trtllm":
        data["host_share"] = {"ngram": NO_OVERLAP_HOST_SHARE}
        what = "n-gram steps without the overlap scheduler (+10% host time)"
    else:
        raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    data["name"] = f"{data['name']}-{engine}"
    data["description"] = (
        f"{data['description']} As {engine}: {what}; see proxy/stepcost/engines.py."
    )
    return data


def engine_profile(engine: str, base: dict[str, Any] | None = None) -> EngineProfile:
    return EngineProfile.model_validate(engine_profile_data(engine, base))


def _scaled_acceptance(data: dict[str, Any], method: str, gain: float) -> dict[str, Any]:
    """The profile's acceptance with ``method``'s rates times ``gain`` (at most 1)."""
    acceptance: dict[str, Any] = data.get("acceptance", {})
    rates = acceptance.get(method)
    if rates is None:
        return acceptance
    return {**acceptance, method: {c: min(r * gain, 1.0) for c, r in rates.items()}}
