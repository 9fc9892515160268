# Two entry points, as the README opens with: `make serve` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Where pip finds the CPU build of torch on a machine without a local wheel
# (for example PyTorch's CPU wheel index); empty means the default configuration.
TORCH_INDEX ?=
TORCH_VERSION ?= 2.13.0

.PHONY: install serve test lint simulate-demo clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# constraints.txt: the exact versions of every package (a lock); the CI check .ci/lowest-versions
# installs the lowest versions pyproject.toml declares instead and runs a smoke test.
$(VENV)/.installed: pyproject.toml constraints.txt | $(BIN)/python
	@if command -v nvidia-smi >/dev/null 2>&1; then \
	  echo "GPU host: installing torch==$(TORCH_VERSION) (CUDA build)"; \
	  $(BIN)/pip install -q "torch==$(TORCH_VERSION)"; \
	else \
	  echo "CPU host: installing the CPU build of torch==$(TORCH_VERSION)"; \
	  $(BIN)/pip install -q "torch==$(TORCH_VERSION)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)); \
	fi
	$(BIN)/pip install -q -c constraints.txt -e ".[dev]"
	touch $@

install: $(VENV)/.installed

serve: install
	@echo "GridPFN: open http://127.0.0.1:8000/ui in a browser (the operator's page; API docs at http://127.0.0.1:8000/docs)"
	$(BIN)/gridpfn serve --host 127.0.0.1 --port 8000

simulate-demo: install
	$(BIN)/gridpfn simulate --network ieee33 --delta 0.1 -n 5000 --seed 0 -o scenarios.parquet

# Two pytest-xdist workers (the suite's own fixtures keep them apart: tests/conftest.py); --dist loadfile keeps
# each file on one worker, so a module's server starts once, and --no-loadscope-reorder hands the files out in the
# order tests/conftest.py collects them (LONGEST_FIRST's first), so no long file starts last. Then tests/security
# alone: its bounds are timed (/healthz within 100 ms, a GP within its limit while a hostile request runs), which
# a second worker's load on 2 cores would measure instead.
# TEST_WORKERS=0: one process. One file: `.venv/bin/python -m pytest <file>`.
TEST_WORKERS ?= 2
test: install
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --ignore=tests/security
	$(BIN)/python -m pytest -q tests/security

# ruff: lint and format check; mypy: strict on models/ and service/engine/ (pyproject.toml says what).
# All three run, and the target fails if any does.
lint: install
	@status=0; \
	echo "ruff check"; $(BIN)/ruff check . || status=1; \
	echo "ruff format --check"; $(BIN)/ruff format --check . || status=1; \
	echo "mypy"; $(BIN)/mypy || status=1; \
	exit $$status

clean:
	rm -rf $(VENV) .pytest_cache
