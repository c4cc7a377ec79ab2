# GIC developer entry points. Every target sets up what it needs from nothing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON := $(abspath $(PY))

.PHONY: setup run test lint typecheck contracts unit bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip==25.3
	$(PY) -m pip install --quiet -e '.[dev,spark,operator]'
	touch $(STAMP)

run: setup
	$(VENV)/bin/gic demo

lint: setup
	$(VENV)/bin/ruff check runtime operator tests bench
	$(VENV)/bin/ruff format --check runtime operator tests bench

typecheck: setup
	$(VENV)/bin/mypy runtime/gic_runtime operator/gic_operator

contracts: setup
	$(VENV)/bin/lint-imports

unit: setup
	$(PY) -m pytest tests

test: lint typecheck contracts unit

bench: setup
	$(PY) -m bench

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
