# `make bench` and `make test` work on a fresh machine: they create .venv and install everything first.
VENV ?= .venv
PY := $(VENV)/bin/python
EPISODES ?= 2000

.PHONY: setup bench test test-fast lint format clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0   # the CPU build; an unpinned torch pulls a multi-GB CUDA build
	$(PY) -m pip install -q -e ".[all,dev]"
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
