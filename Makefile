# Two commands on a fresh machine:  `make run`  and  `make test`  (see README.md).
VENV ?= .venv
PYTHON ?= python3
STAMP := $(VENV)/.specroute-installed

.PHONY: run test test-e2e test-fast lint docs bench clean

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $@

## run: the gateway; no ARGS = embedded simulated fleet on http://127.0.0.1:8080
run: $(STAMP)
	$(VENV)/bin/specroute serve $(ARGS)

## test: the whole suite (unit, integration, real redis-server, real vLLM e2e)
test:
	bash scripts/test.sh

## test-fast: everything except the real-vLLM tier
test-fast: $(STAMP)
	bash scripts/test.sh -m "not e2e"

## test-e2e: only the real-vLLM tier
test-e2e:
	bash scripts/test.sh tests/e2e

## docs: the manual on http://127.0.0.1:8000, rebuilt on every edit (reference pages: python -m proxy.docs)
docs: $(STAMP)
	$(VENV)/bin/mkdocs serve

lint: $(STAMP)
	$(VENV)/bin/ruff check proxy tests loadtests
	$(VENV)/bin/mypy proxy

clean:
	rm -rf $(VENV) .venv-vllm .cache .pytest_cache .mypy_cache .ruff_cache
