"""GPU prices for dollars per million output tokens, each with its date and source.

Defaults are on-demand list prices of one cloud (AWS, us-east-1) so they compare like for
like; each is the instance price divided by its GPU count (so it includes the host's CPU,
memory and disk). They were read from public transcriptions of the provider's price list,
cited below with the date they were read; prices move, so pass ``--gpu-price-per-hour``
for your own rate (reserved, spot, another provider).

    usd_per_million_output_tokens = gpus * usd_per_gpu_hour / (output_tokens_per_s * 3600) * 1e6
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class GpuPrice:
    key: str
    name: str
    usd_per_hour: float
    date: str
    source: str

    def describe(self) -> str:
        return f"{self.name}: ${self.usd_per_hour:.3f}/GPU-hour ({self.source}; read {self.date})"


GPU_PRICES: Mapping[str, GpuPrice] = MappingProxyType(
    {
        "a100": GpuPrice(
            "a100",
            "NVIDIA A100 80GB SXM (AWS p4de.24xlarge, 8 GPUs, $27.447/h)",
            27.44705 / 8,
            "2026-11-09",
            "AWS EC2 on-demand, us-east-1, as transcribed in github.com/datareceipts/"
            "data-receipts 109-gpu-pricing/hyperscalers.json",
        ),
        "h100": GpuPrice(
            "h100",
            "NVIDIA H100 80GB SXM (AWS p5.48xlarge, 8 GPUs, $55.04/h)",
            55.04 / 8,
            "2026-11-09",
            "AWS EC2 on-demand, us-east-1, as transcribed in github.com/datareceipts/"
            "data-receipts 109-gpu-pricing/hyperscalers.json",
        ),
        "h200": GpuPrice(
            "h200",
            "NVIDIA H200 141GB (AWS p5en.48xlarge, 8 GPUs, $63.296/h)",
            63.296 / 8,
            "2026-08-06",
            "AWS EC2 on-demand, us-east-1, as listed by `dstack offer` in "
            "github.com/dstackai/dstack pull request 4110",
        ),
        "l40s": GpuPrice(
            "l40s",
            "NVIDIA L40S 48GB (AWS g6e.xlarge, 1 GPU, $1.861/h)",
            1.861,
            "2025-08-12",
            "AWS EC2 on-demand, us-east-1, as tabulated in modal.com/blog/nvidia-l40s-price-article",
        ),
    }
)


def resolve_price(gpu: str, usd_per_hour: float | None = None) -> GpuPrice:
    """A preset by key, or a custom price (then ``gpu`` is only its name)."""
    if usd_per_hour is not None:
        return GpuPrice("custom", gpu, usd_per_hour, "given", "--gpu-price-per-hour")
    try:
        return GPU_PRICES[gpu.lower()]
    except KeyError:
        known = ", ".join(GPU_PRICES)
        raise ValueError(
            f"unknown GPU {gpu!r}: use one of {known} or --gpu-price-per-hour"
        ) from None


def usd_per_million_tokens(tokens_per_s: float, gpus: int, usd_per_gpu_hour: float) -> float | None:
    if tokens_per_s <= 0:
        return None
    return gpus * usd_per_gpu_hour / (tokens_per_s * 3600.0) * 1e6


def price_notes() -> list[str]:
    return [p.describe() for p in GPU_PRICES.values()]
