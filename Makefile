# GIC developer entry points. Every target sets up what it needs from nothing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON := $(abspath $(PY))

.PHONY: setup jvm run test lint typecheck contracts unit bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip==25.3
	$(PY) -m pip install --quiet -e '.[dev,spark,operator]'
	touch $(STAMP)

# The placement helper (a small jar built with javac against PySpark's jars, cached by
# source digest; the runtime builds it on demand too, see docs/architecture.md §13.2).
jvm: setup
	$(PY) -c 'from gic_runtime.spark.locality import main; raise SystemExit(main())'

run: setup
	$(VENV)/bin/gic demo

lint: setup
	$(VENV)/bin/ruff check runtime operator tests bench
	$(VENV)/bin/ruff format --check runtime operator tests bench

typecheck: setup
	$(VENV)/bin/mypy runtime/gic_runtime operator/gic_operator

contracts: setup
	$(VENV)/bin/lint-imports

unit: setup jvm
	$(PY) -m pytest tests

test: lint typecheck contracts unit

bench: setup jvm
	$(PY) -m bench

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
