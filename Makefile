# `make bench` and `make test` work on a fresh machine: they create .venv and install everything first.
# Needs Python >= 3.11 (PYTHON=python3.12 picks another interpreter) and about 3 GB of disk for .venv.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
EPISODES ?= 2000
# torch comes from the default package index unless TORCH_INDEX names another one: where the default index serves
# CUDA builds of torch (multi-GB), pass PyTorch's CPU wheel index, e.g. `make test TORCH_INDEX=<url>`.
TORCH_INDEX ?=

.PHONY: setup bench test test-fast lint format clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and f"agentgym needs Python >= 3.11, $(PYTHON) is {sys.version.split()[0]}: make PYTHON=python3.11 ...")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))   # want the CPU build: see TORCH_INDEX
	$(PY) -m pip install -q -e ".[all,dev]"
	$(PY) -m pip install -q --no-deps bfcl-eval==2026.3.23   # BFCL-v0's data and checkers; its pins would downgrade numpy
	touch $@

bench: setup
	$(VENV)/bin/agentgym bench --episodes $(EPISODES) --out reports/bench

test: setup
	$(PY) -m pytest -q

test-fast: setup
	$(PY) -m pytest -q -m "not slow"

lint: setup
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff format . && $(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) reports runs .pytest_cache .ruff_cache .hypothesis
