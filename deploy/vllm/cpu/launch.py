"""Install vLLM, build the tiny models, and run real vLLM servers until interrupted.

    python deploy/vllm/cpu/launch.py --servers plain,ngram,draft-good,draft-bad

Both steps are cached, so a second start costs only the server boot. ``prepare()`` is the
importable half; the server lifecycle lives in ``servers.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

try:
    from deploy.vllm.cpu.server_args import (
        DEFAULT_MODEL_CACHE,
        DEFAULT_VENV,
        HERE,
        SERVER_NAMES,
        venv_python,
    )
    from deploy.vllm.cpu.servers import running_servers
except ImportError:  # run as a script: only this directory is on sys.path
    from server_args import (  # type: ignore[no-redef,import-not-found]
        DEFAULT_MODEL_CACHE,
        DEFAULT_VENV,
        HERE,
        SERVER_NAMES,
        venv_python,
    )
    from servers import running_servers  # type: ignore[no-redef,import-not-found]


def prepare(venv: Path = DEFAULT_VENV, model_cache: Path = DEFAULT_MODEL_CACHE) -> dict[str, Path]:
    """Install vLLM and build the models (both cached); return the model directories."""
    env = {**os.environ, "SPECROUTE_VLLM_VENV": str(venv)}
    subprocess.run(["bash", str(HERE / "install.sh")], check=True, env=env)
    built = subprocess.run(
        [str(venv_python(venv)), str(HERE / "build_models.py"), "--cache", str(model_cache)],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    return {name: Path(path) for name, path in json.loads(built.stdout).items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run real vLLM CPU servers until interrupted.")
    parser.add_argument("--servers", default=",".join(SERVER_NAMES), help="comma-separated")
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument("--model-cache", type=Path, default=DEFAULT_MODEL_CACHE)
    parser.add_argument("--log-dir", type=Path, default=None)
    parser.add_argument("--timeout", type=float, default=600.0, help="readiness timeout, s")
    parser.add_argument("--sequential", action="store_true", help="boot one at a time")
    args = parser.parse_args(argv)

    # SIGTERM must unwind through the context manager just like Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    dirs = prepare(args.venv, args.model_cache.resolve())
    started = time.monotonic()
    with running_servers(
        [n.strip() for n in args.servers.split(",") if n.strip()],
        model_dirs=dirs,
        venv=args.venv,
        log_dir=args.log_dir,
        timeout_s=args.timeout,
        parallel=not args.sequential,
    ) as servers:
        report = {
            name: {"url": s.url, "log": str(s.log_path), "pid": s.process.pid}
            for name, s in servers.items()
        }
        print(json.dumps(report, indent=2), flush=True)
        print(f"ready in {time.monotonic() - started:.0f} s; Ctrl-C stops", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main())
