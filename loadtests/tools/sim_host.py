"""Several simulated vLLM engines in one process, each on its own port.

One interpreter starts in about a second where four take several on a busy 2-core host,
and the simulators together use a few percent of a core at the benchmarks' time scales
(their step timing is checked at ``GET /admin/engine`` and printed by every benchmark).

    python -m loadtests.tools.sim_host --profile P.json --sim plain-0:none:0:0:9001 \
        --sim ngram-0:ngram:4:1:9002[:acceptance]

Each ``--sim`` is ``name:method:k:seed:port[:forced acceptance]``. Runs until terminated.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import Sequence

from proxy.sim.config import Faults, SimConfig
from proxy.sim.server import SimServer
from proxy.stepcost import load_profile


def _config(
    text: str, profile_path: str, model: str, prefix_caching: bool = True
) -> tuple[SimConfig, int]:
    parts = text.split(":")
    if len(parts) not in (5, 6):
        raise SystemExit(f"--sim {text!r}: want name:method:k:seed:port[:acceptance]")
    _name, method, k, seed, port = parts[:5]
    faults = Faults(acceptance=float(parts[5])) if len(parts) == 6 else Faults()
    config = SimConfig.model_validate(
        {
            "model": model,
            "speculation": method,
            "k": max(int(k), 1),
            "seed": int(seed),
            "profile": load_profile(profile_path),
            "faults": faults,
            "prefix_caching": prefix_caching,
        }
    )
    return config, int(port)


async def serve(
    sims: Sequence[str], profile_path: str, model: str, prefix_caching: bool = True
) -> None:
    servers = []
    for text in sims:
        config, port = _config(text, profile_path, model, prefix_caching)
        server = SimServer(config, port=port)
        await server.start()
        servers.append(server)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for server in servers:
        await server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--profile", required=True)
    parser.add_argument("--model", default="sim-llama-8b")
    parser.add_argument("--sim", action="append", required=True)
    parser.add_argument(
        "--no-prefix-caching",
        action="store_true",
        help="engines without a prefix cache (benchmarks of decode cost alone)",
    )
    args = parser.parse_args(argv)
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(args.sim, args.profile, args.model, not args.no_prefix_caching))
    else:
        uvloop.run(serve(args.sim, args.profile, args.model, not args.no_prefix_caching))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
