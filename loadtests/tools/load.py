"""``specroute bench load``: drive any OpenAI-compatible endpoint with a trace and report.

    specroute bench load --url http://127.0.0.1:8080 --model sim-llama-8b \
        --trace c1@30,c16@30,r5-40@60,r200@2 --mix chat=0.5,rag=0.3,code=0.2

Reports, per phase and per prompt class: TTFT, TPOT, ITL and end-to-end latency
(p50/p90/p99), output tokens/s, goodput at the given SLOs, acceptance (from the responses'
speculative-decoding summaries and from the endpoint's ``/metrics`` counters, when it has
them) and dollars per million output tokens for ``--gpus`` GPUs at the chosen price.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadtests.tools.endpoints import fetch_metrics
from loadtests.tools.loadgen import LoadGenerator, run_async
from loadtests.tools.prices import price_notes, resolve_price
from loadtests.tools.prompts import PromptFactory, parse_mix
from loadtests.tools.report import machine, publish, table
from loadtests.tools.summary import Slo, fmt, metrics_acceptance, summarize
from loadtests.tools.traces import format_trace, parse_trace

DEFAULT_TRACE = "c1@20,c8@20,c32@20,r4-40@30,r200@1,c8@20"


async def _counters(url: str) -> dict[str, float]:
    try:
        return await fetch_metrics(url, ["vllm:spec_decode"])
    except Exception:  # not every endpoint has /metrics
        return {}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    headers = dict(h.split(":", 1) for h in args.header)
    generator = LoadGenerator(
        args.url,
        args.model,
        api=args.api,
        time_scale=args.time_scale,
        temperature=args.temperature,
        ignore_eos=not args.no_ignore_eos,
        headers={k.strip(): v.strip() for k, v in headers.items()},
        progress="load",
    )
    phases = parse_trace(args.trace)
    before = await _counters(args.url)
    result = await generator.run(
        phases, PromptFactory(args.seed, parse_mix(args.mix), args.output_scale)
    )
    after = await _counters(args.url)
    slo = Slo(args.slo_ttft_ms / 1000, args.slo_tpot_ms / 1000)
    price = resolve_price(args.gpu, args.gpu_price_per_hour)
    scale, end = result.time_scale, result.phase_windows[-1][1]
    return {
        "settings": {k: v for k, v in vars(args).items() if k != "out"}
        | {"trace": format_trace(phases)},
        "slo": slo.describe(),
        "price": price.describe(),
        "overall": summarize(result.records, (0.0, end), scale, slo, price, args.gpus),
        "phases": [
            summarize(result.records, w, scale, slo, price, args.gpus) | {"name": p.name}
            for p, w in zip(result.phases, result.phase_windows, strict=True)
        ],
        "metrics_acceptance": metrics_acceptance(before, after),
        "client_dropped": result.dropped,
        "machine": machine(),
    }


def _row(name: str, g: dict[str, Any]) -> list[str]:
    def trio(key: str) -> str:
        return " / ".join(fmt(g[key][q]) for q in ("p50", "p90", "p99"))

    return [
        name, str(g["ok"]), str(g["errors"]), trio("ttft_ms"), trio("tpot_ms"), trio("itl_ms"),
        trio("e2e_ms"), fmt(g["output_tokens_per_s"], ".0f"), fmt(g["goodput_rps"], ".2f"),
        fmt(g["acceptance"], ".2f"), fmt(g.get("usd_per_m_output_tokens"), ".3f"),
    ]  # fmt: skip


HEADER = ["", "ok", "errors", "TTFT p50/p90/p99 ms", "TPOT p50/p90/p99 ms", "ITL p50/p90/p99 ms",
          "E2E p50/p90/p99 ms", "out tok/s", "goodput req/s", "acceptance", "$/M out tok"]  # fmt: skip


def render(results: dict[str, Any]) -> str:
    s = results["settings"]
    overall = results["overall"]
    rows = [_row("whole trace", overall["overall"])]
    rows += [
        _row(f"phase {i + 1}: {p['name']}", p["overall"]) for i, p in enumerate(results["phases"])
    ]
    rows += [_row(f"class {c}", g) for c, g in overall["classes"].items()]
    return (
        "\n".join(
            [
                "# Load test",
                "",
                f"Endpoint {s['url']} model `{s['model']}` ({s['api']}); trace `{s['trace']}`; mix `{s['mix']}`; "
                f"seed {s['seed']}; time scale {s['time_scale']:g}. SLO: {results['slo']}.",
                f"Cost: {s['gpus']} GPU(s) at {results['price']}.",
                "",
                table(HEADER, rows),
                "",
                f"Acceptance from /metrics (vllm:spec_decode_* deltas): {fmt(results['metrics_acceptance'], '.3f')}; "
                f"requests the client itself dropped (open-loop cap): {results['client_dropped']}.",
                "",
                "Price presets: " + "; ".join(price_notes()),
            ]
        )
        + "\n"
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="specroute bench load", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--url", required=True, help="base URL (no /v1)")
    parser.add_argument("--model", required=True)
    parser.add_argument("--api", choices=["chat", "completions"], default="chat")
    parser.add_argument(
        "--trace",
        default=DEFAULT_TRACE,
        help="e.g. c8@30,r5-50@60,r200@2 (see loadtests/tools/traces.py)",
    )
    parser.add_argument("--mix", default="chat=0.5,rag=0.3,code=0.2")
    parser.add_argument("--output-scale", type=float, default=1.0)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument(
        "--no-ignore-eos", action="store_true", help="let the model stop (lengths vary)"
    )
    parser.add_argument("--header", action="append", default=[], help="extra request header K:V")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--time-scale", type=float, default=1.0, help="for slowed-down simulators")
    parser.add_argument("--slo-ttft-ms", type=float, default=500.0)
    parser.add_argument("--slo-tpot-ms", type=float, default=25.0)
    parser.add_argument("--gpu", default="h100", help="price preset: a100, h100, h200, l40s")
    parser.add_argument("--gpu-price-per-hour", type=float)
    parser.add_argument("--gpus", type=int, default=1, help="GPUs behind the endpoint")
    parser.add_argument("--out", type=Path)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    results = run_async(run(args))
    return publish("load", args.out, results, lambda _folder: render(results))


if __name__ == "__main__":
    raise SystemExit(main())
