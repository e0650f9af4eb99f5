"""Step-cost profiles for GPUs other than the measured H200: estimates, derived from specs.

Only the H200 profile (``default_profile.json``) is measured. The A100, H100 and L40S
profiles below are **estimates**: the H200 step-cost grid rescaled by each GPU's published
memory bandwidth and dense BF16 tensor throughput. Use them to compare fleets and to see
how the break-even point moves with the hardware, not as measured truth; measure your own
(see ``loadtests/README.md``, "Your own hardware") when the answer matters.

How a profile is derived from the H200's, for each grid point T(B, q) (batch B, q query
tokens per sequence):

1. Split the measured time into a memory-bound and a compute-bound share with a roofline
   estimate of the step on the H200: bytes moved = weights (16.06 GB for Llama-3.1-8B in
   bf16) + B x the KV cache of a 1024-token context (128 KiB per token: 32 layers x 8 KV
   heads x 128 dims x 2 (K, V) x 2 bytes), over 4.8 TB/s; FLOPs = 2 x 8.03e9 x B x q over
   989 TFLOPS. The memory share is memory time / (memory time + compute time).
2. Scale the memory share by the bandwidth ratio (H200 / GPU) and the compute share by the
   dense BF16 ratio (H200 / GPU): T'(B, q) = T(B, q) x (m x bw_ratio + (1 - m) x flops_ratio).
3. Draft steps scale as the target's decode step at the same batch (T'(B,1) / T(B,1));
   prefill per token (compute-bound) by the FLOPs ratio; the KV cache capacity by the
   memory left after the weights ((memory - 16 GB) / (141 - 16 GB) x the H200's 450k
   tokens). Acceptance rates do not depend on the GPU and are kept.

Published figures (SXM parts where there is a choice; dense, i.e. without 2:4 sparsity):

- H200: 4.8 TB/s HBM3e, 141 GB, 989 TFLOPS BF16 (NVIDIA's H200 page as transcribed at
  lzwjava.github.io/nvidia-h200-gpu-specs-en and morphllm.com/nvidia-h200: same Hopper
  compute as the H100, 1,979 TFLOPS BF16 with sparsity);
- H100 SXM: 3.35 TB/s HBM3, 80 GB, 989.4 TFLOPS BF16
  (glennklockwood.com/garden/processors/h100, from NVIDIA's Hopper whitepaper; 1,979 with
  sparsity in NVIDIA's datasheet);
- A100 80GB SXM: 2.039 TB/s HBM2e, 80 GB, 312 TFLOPS BF16
  (glennklockwood.com/garden/processors/A100, from NVIDIA's A100 datasheet);
- L40S: 864 GB/s GDDR6, 48 GB, 362.05 TFLOPS BF16 (733 with sparsity; NVIDIA's L40/L40S
  table as reproduced at mullet.se, product 355414).

What this leaves out: the L40S and A100 have smaller L2 caches and no TMA, so their
attention kernels reach a smaller share of peak bandwidth than Hopper's; PCIe cards run
lower clocks under sustained load. Real step times will be somewhat above these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.stepcost.profile import EngineProfile, default_profile_data

_PARAMS = 8.03e9  # Llama-3.1-8B
_WEIGHT_BYTES = 2 * _PARAMS
_KV_BYTES_PER_TOKEN = 32 * 8 * 128 * 2 * 2
_CONTEXT = 1024  # the calibration's per-sequence context


@dataclass(frozen=True, slots=True)
class GpuSpec:
    name: str
    memory_gb: float
    bandwidth_tb_s: float
    bf16_dense_tflops: float


GPUS: dict[str, GpuSpec] = {
    "h200": GpuSpec("h200", 141.0, 4.8, 989.4),
    "h100": GpuSpec("h100", 80.0, 3.35, 989.4),
    "a100": GpuSpec("a100", 80.0, 2.039, 312.0),
    "l40s": GpuSpec("l40s", 48.0, 0.864, 362.05),
}
MEASURED = "h200"


def memory_share(batch: int, query_len: int, base: GpuSpec = GPUS[MEASURED]) -> float:
    """Roofline estimate of the memory-bound share of one step on ``base``."""
    memory_s = (_WEIGHT_BYTES + batch * _CONTEXT * _KV_BYTES_PER_TOKEN) / (
        base.bandwidth_tb_s * 1e12
    )
    compute_s = 2 * _PARAMS * batch * query_len / (base.bf16_dense_tflops * 1e12)
    return memory_s / (memory_s + compute_s)


def step_factor(batch: int, query_len: int, gpu: GpuSpec) -> float:
    """How many times longer a (batch, query_len) step takes on ``gpu`` than on the H200."""
    base = GPUS[MEASURED]
    share = memory_share(batch, query_len, base)
    bandwidth = base.bandwidth_tb_s / gpu.bandwidth_tb_s
    flops = base.bf16_dense_tflops / gpu.bf16_dense_tflops
    return share * bandwidth + (1 - share) * flops


def derived_profile_data(gpu: str) -> dict[str, Any]:
    """The default (H200) profile rescaled to ``gpu`` (see the module docstring)."""
    data = default_profile_data()
    spec = _spec(gpu)
    if spec.name == MEASURED:
        return data
    base = GPUS[MEASURED]
    batches, query_lens = data["batch_sizes"], data["query_lens"]
    data["step_ms"] = [
        [t * step_factor(b, q, spec) for q, t in zip(query_lens, row, strict=True)]
        for b, row in zip(batches, data["step_ms"], strict=True)
    ]
    decode = [step_factor(b, 1, spec) for b in batches]
    data["draft_ms"] = {
        k: [t * f for t, f in zip(row, decode, strict=True)] for k, row in data["draft_ms"].items()
    }
    flops = base.bf16_dense_tflops / spec.bf16_dense_tflops
    data["prefill_ms_per_token"] = data["prefill_ms_per_token"] * flops
    free = (spec.memory_gb - _WEIGHT_BYTES / 1e9) / (base.memory_gb - _WEIGHT_BYTES / 1e9)
    data["kv_cache_tokens"] = int(data["kv_cache_tokens"] * free)
    data["name"] = f"llama-3.1-8b-{spec.name}-bf16-estimated"
    data["description"] = (
        f"ESTIMATE for one {spec.name.upper()}: the measured H200 profile rescaled by memory "
        f"bandwidth ({spec.bandwidth_tb_s} vs {base.bandwidth_tb_s} TB/s) and dense BF16 "
        f"compute ({spec.bf16_dense_tflops:g} vs {base.bf16_dense_tflops:g} TFLOPS); "
        "see proxy/stepcost/hardware.py."
    )
    return data


def gpu_profile(gpu: str) -> EngineProfile:
    return EngineProfile.model_validate(derived_profile_data(gpu))


def _spec(gpu: str) -> GpuSpec:
    spec = GPUS.get(gpu.lower())
    if spec is None:
        raise ValueError(f"unknown GPU {gpu!r}; known: {', '.join(GPUS)}")
    return spec
