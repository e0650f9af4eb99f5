"""Several simulated engines in one process, each on its own port.

One interpreter starts in about a second where four take several on a busy 2-core host,
and the simulators together use a few percent of a core at the benchmarks' time scales
(their step timing is checked at ``GET /admin/engine`` and printed by every benchmark).

    python -m loadtests.tools.sim_host --profile P.json --sim plain-0:none:0:0:9001 \\
        --sim ngram-0:ngram:4:1:9002[:acceptance]
    python -m loadtests.tools.sim_host --fleet fleet.json

Each ``--sim`` is a vLLM engine, ``name:method:k:seed:port[:forced acceptance]``, on the
``--profile`` step costs. ``--fleet`` is a JSON list of :class:`HostedSim` objects: engines
of any kind (vLLM, SGLang, TensorRT-LLM), each with its own profile file (laid over that
engine's profile, proxy/stepcost/engines.py). Runs until terminated.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import Sequence
from pathlib import Path

import orjson
from pydantic import BaseModel, ConfigDict, Field

from proxy.sim.config import Faults, SimConfig
from proxy.sim.server import SimServer
from proxy.stepcost import EngineName, SpecMethod, engine_profile_data, load_profile


class HostedSim(BaseModel):
    """One simulator of a ``--fleet`` file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    port: int = Field(gt=0)
    engine: EngineName = "vllm"
    speculation: SpecMethod = "none"
    k: int = Field(default=0, ge=0)
    seed: int = 0
    acceptance: float | None = Field(default=None, ge=0.0, le=1.0)  # forced, all classes
    profile: str

    def config(self, model: str, prefix_caching: bool = True) -> SimConfig:
        profile = load_profile(self.profile, base=engine_profile_data(self.engine))
        faults = Faults(acceptance=self.acceptance)
        return SimConfig(
            model=model,
            engine=self.engine,
            speculation=self.speculation,
            k=max(self.k, 1),
            seed=self.seed,
            profile=profile,
            faults=faults,
            prefix_caching=prefix_caching,
        )


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


def read_fleet(path: Path) -> list[HostedSim]:
    entries = orjson.loads(path.read_bytes())
    if not isinstance(entries, list):
        raise SystemExit(f"--fleet {path}: want a JSON list of simulators")
    return [HostedSim.model_validate(entry) for entry in entries]


async def serve(configs: Sequence[tuple[SimConfig, int]]) -> None:
    servers = []
    for config, port in configs:
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
    parser.add_argument("--profile", help="step costs of every --sim")
    parser.add_argument("--model", default="sim-llama-8b")
    parser.add_argument("--sim", action="append", default=[])
    parser.add_argument("--fleet", type=Path, help="JSON list of simulators (HostedSim)")
    parser.add_argument(
        "--no-prefix-caching",
        action="store_true",
        help="engines without a prefix cache (benchmarks of decode cost alone)",
    )
    args = parser.parse_args(argv)
    caching = not args.no_prefix_caching
    if args.sim and not args.profile:
        parser.error("--sim needs --profile")
    configs = [_config(text, args.profile, args.model, caching) for text in args.sim]
    if args.fleet is not None:
        configs += [(s.config(args.model, caching), s.port) for s in read_fleet(args.fleet)]
    if not configs:
        parser.error("give --sim or --fleet")
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(configs))
    else:
        uvloop.run(serve(configs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
