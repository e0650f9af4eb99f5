"""What a real vLLM server is started with: paths, speculative configs, command, environment.

Standard library only, like ``servers.py`` that uses it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
DEFAULT_VENV = Path(os.environ.get("SPECROUTE_VLLM_VENV", REPO / ".venv-vllm"))
DEFAULT_MODEL_CACHE = Path(os.environ.get("SPECROUTE_MODEL_CACHE", REPO / ".cache" / "models"))
SERVED_MODEL_NAME = "tiny"
SERVER_NAMES = ("plain", "ngram", "draft-good", "draft-bad")
# Started only by the tests that need them (not by default): a plain server that wants an
# API key (vLLM's --api-key, a fresh random key per start), to check a gateway can front it;
# ``ngram-bf16``, n-gram speculation in bfloat16 (another ~3 GB), other numerics than its
# float32 reference, which the shadow's numerics test must flag.
EXTRA_SERVER_NAMES = ("plain-keyed", "ngram-bf16")
DTYPES = {"ngram-bf16": "bfloat16"}  # every other server: float32
KEYED_SERVER_NAMES = ("plain-keyed",)  # started with --api-key
NGRAM_CONFIG = {
    "method": "ngram",
    "num_speculative_tokens": 4,
    "prompt_lookup_max": 4,
    "prompt_lookup_min": 2,
}
DRAFT_TOKENS = 3
# --enable-prompt-tokens-details: usage reports the prefix-cache hits
# (``prompt_tokens_details.cached_tokens``), which the prefix-affinity test reads.
COMMON_ARGS = ("--max-model-len", "1024", "--enforce-eager", "--enable-prompt-tokens-details")

# Arms PR_SET_PDEATHSIG before exec'ing the server: if the launching process dies without
# cleaning up (SIGKILL, OOM), the kernel sends the server SIGTERM instead of orphaning it.
# The flag survives execve and is tied to the thread that forked, hence Popen runs only on
# the caller's thread.
_EXEC_WITH_PARENT_DEATH_SIGNAL = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])\n"
)


def venv_python(venv: Path = DEFAULT_VENV) -> Path:
    return venv / "bin" / "python"


def speculative_config(name: str, model_dirs: Mapping[str, Path]) -> dict[str, Any] | None:
    if name in ("plain", "plain-keyed"):
        return None
    if name in ("ngram", "ngram-bf16"):
        return dict(NGRAM_CONFIG)
    if name in ("draft-good", "draft-bad"):
        return {
            "method": "draft_model",
            "model": str(model_dirs[name]),
            "num_speculative_tokens": DRAFT_TOKENS,
        }
    known = ", ".join(SERVER_NAMES + EXTRA_SERVER_NAMES)
    raise ValueError(f"unknown server {name!r}; known: {known}")


def server_command(
    python: Path,
    model_dir: Path,
    port: int,
    spec: dict[str, Any] | None,
    api_key: str | None = None,
    dtype: str = "float32",
) -> list[str]:
    cmd = [
        str(python), "-c", _EXEC_WITH_PARENT_DEATH_SIGNAL,
        "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir),
        "--served-model-name", SERVED_MODEL_NAME,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--dtype", dtype,
        *COMMON_ARGS,
    ]  # fmt: skip
    if spec is not None:
        # vLLM refuses this flag without a speculative config, so plain servers go without.
        cmd += ["--speculative-config", json.dumps(spec)]
        cmd += ["--per-request-spec-decode-metrics", "summary"]
    if api_key is not None:
        # One argument, joined: a random key may start with "-" (token_urlsafe does one
        # time in 64), which argparse would read as the next option and fail to start.
        cmd.append(f"--api-key={api_key}")
    return cmd


def server_env(cpu: int) -> dict[str, str]:
    """Environment for one server: offline, a 1 GiB KV cache, one pinned OpenMP thread.

    Several servers share two cores; each binds its one compute thread to ``cpu`` so they
    spread over the cores instead of all spinning on every core. Its engine core, which
    vLLM gives no such setting, is bound there once the server is ready
    (``servers.pin_engine_core``).
    """
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": str(cpu),
        "OMP_NUM_THREADS": "1",
        "VLLM_HOST_IP": "127.0.0.1",
        "VLLM_LOOPBACK_IP": "127.0.0.1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
