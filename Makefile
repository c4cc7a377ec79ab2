# GIC developer entry points. Every target sets up what it needs from nothing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Every Python dependency, transitive ones included, at exact versions with their hashes
# (pip-compile --generate-hashes from pyproject.toml; regenerate with `make lock`).
LOCK := requirements/dev.lock
# pip itself (every venv upgrades to it first) and the lock tools, hashed too.
PIP_LOCK := requirements/pip.lock
LOCK_TOOLS_LOCK := requirements/lock-tools.lock
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON := $(abspath $(PY))
# `make run` gets a venv of its own with only what running needs (the runtime and PySpark,
# run.lock), so the demo does not wait for the development toolchain; every other target
# uses $(VENV) with everything (dev.lock).
RUN_VENV ?= .venv-run
RUN_PY := $(RUN_VENV)/bin/python
RUN_STAMP := $(RUN_VENV)/.installed
RUN_LOCK := requirements/run.lock

.PHONY: setup jvm run test lint typecheck contracts unit bench clean controlplane helm cluster \
	lock spark-settings kubelet node images

setup: $(STAMP)

# The locked versions only: --require-hashes refuses anything unpinned or unhashed, and the
# project itself goes in without dependencies and without an isolated build environment
# (its build backend comes from the lock as well).
$(STAMP): pyproject.toml $(LOCK) $(PIP_LOCK)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --require-hashes -r $(PIP_LOCK)
	$(PY) -m pip install --quiet --require-hashes -r $(LOCK)
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	$(PY) -m pip check || { echo "$(LOCK) lags pyproject.toml: run make lock" >&2; exit 1; }
	touch $(STAMP)

# The same for `make run`, one step per line and pip's own progress (the first run
# downloads PySpark, about 450 MB).
$(RUN_STAMP): pyproject.toml $(RUN_LOCK) $(PIP_LOCK)
	@echo "make run: [1/4] virtual environment $(RUN_VENV)"
	$(PYTHON) -m venv $(RUN_VENV)
	@echo "make run: [2/4] pip"
	$(RUN_PY) -m pip install --progress-bar on --require-hashes -r $(PIP_LOCK)
	@echo "make run: [3/4] the runtime and PySpark, locked ($(RUN_LOCK))"
	$(RUN_PY) -m pip install --progress-bar on --require-hashes -r $(RUN_LOCK)
	@echo "make run: [4/4] gic itself"
	$(RUN_PY) -m pip install --progress-bar on --no-deps --no-build-isolation -e .
	$(RUN_PY) -m pip check || { echo "$(RUN_LOCK) lags pyproject.toml: run make lock" >&2; exit 1; }
	touch $(RUN_STAMP)

# Regenerate the lock files after changing dependencies in pyproject.toml (needs PyPI):
# dev.lock for this venv and CI; run.lock for `make run`; operator.lock, runtime.lock (the
# runtime and the spark extra but PySpark, requirements/runtime.in) and
# build.lock (the wheel build) for the images. Locks are for CPython 3.11 on Linux (the
# images' and CI's).
LOCK_TOOLS := $(or $(TMPDIR),/tmp)/gic-lock-tools
PIP_COMPILE = CUSTOM_COMPILE_COMMAND="make lock" PIP_FIND_LINKS= $(LOCK_TOOLS)/bin/pip-compile \
	--quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-find-links \
	--no-emit-index-url $(if $(UPGRADE),--upgrade)
# `make lock` keeps the locked versions that still satisfy pyproject.toml's ranges;
# `make lock UPGRADE=1` moves every package to the newest version its range allows.
lock:
	$(PYTHON) -m venv $(LOCK_TOOLS)
	$(LOCK_TOOLS)/bin/pip install --quiet --require-hashes -r $(PIP_LOCK)
	$(LOCK_TOOLS)/bin/pip install --quiet --require-hashes -r $(LOCK_TOOLS_LOCK)
	$(PIP_COMPILE) --extra dev --extra spark --extra operator \
		-o requirements/dev.lock pyproject.toml requirements/build.in
	$(PIP_COMPILE) --extra spark -o requirements/run.lock pyproject.toml requirements/build.in
	$(PIP_COMPILE) --extra operator -o requirements/operator.lock pyproject.toml
	$(PIP_COMPILE) -o requirements/runtime.lock pyproject.toml requirements/runtime.in
	$(PIP_COMPILE) -o requirements/build.lock requirements/build.in
	$(PIP_COMPILE) -o $(LOCK_TOOLS_LOCK) requirements/lock-tools.in

# The placement helper (a small jar built with javac against PySpark's jars, cached by
# source digest; the runtime builds it on demand too, see docs/architecture.md §13.2).
jvm: setup
	$(PY) -c 'from gic_runtime.spark.locality import main; raise SystemExit(main())'

# The Spark settings the operator checks sparkConf keys against, listed from the locked
# PySpark's jars (needs java); rerun after changing PySpark's version in the lock. A test
# fails while the committed list lags the lock.
spark-settings: setup
	$(PY) -m gic_operator.spark_settings_gen

run: export PYSPARK_PYTHON := $(abspath $(RUN_PY))
run: $(RUN_STAMP)
	@echo "make run: gic demo"
	$(RUN_VENV)/bin/gic demo

lint: setup
	$(VENV)/bin/ruff check runtime operator tests bench
	$(VENV)/bin/ruff format --check runtime operator tests bench docs README.md

typecheck: setup
	$(VENV)/bin/mypy runtime/gic_runtime operator/gic_operator bench

contracts: setup
	$(VENV)/bin/lint-imports

# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl, built from
# Kubernetes' Go modules pinned in controlplane/go.mod into .cache/controlplane/<version>/bin
# (reused when up to date; installs a Go toolchain into .cache/go when go is missing or old).
controlplane:
	PYTHON=$(PYTHON) controlplane/build.sh

# The Helm CLI, built from helm.sh/helm/v3 pinned in controlplane/helm/go.mod into
# .cache/controlplane/helm-<version>/bin (reused when up to date; a module of its own, so
# it never changes the control plane's inputs).
helm:
	PYTHON=$(PYTHON) controlplane/helm/build.sh

# The kubelet of the same Kubernetes release and the sandbox process of its pods, built from
# controlplane/node/go.mod into .cache/controlplane/node-<version>/bin (reused when up to
# date; a module of its own, so it never changes the control plane's inputs).
kubelet:
	PYTHON=$(PYTHON) controlplane/node/build.sh

# A control plane with a real node (containerd and runc from Debian, the kubelet above), in
# the foreground until Ctrl-C; it prints the KUBECONFIG to use and a pod to try. Needs root
# and `apt-get install containerd runc containernetworking-plugins`. IMAGES="a.tar b.tar"
# imports image archives (podman save --format oci-archive) into the node's image store.
node: setup controlplane kubelet
	$(PY) -m tests.e2e.real_node $(foreach image,$(IMAGES),--image $(image))

# A control plane with one process-kubelet node, in the foreground until Ctrl-C; it prints
# the KUBECONFIG and PATH (kubectl, helm) to use and the commands of the local path.
cluster: setup controlplane helm
	$(PY) -m tests.controlplane

# The container images: localhost/gic-spark:<version> and localhost/gic-operator:<version>
# from the Dockerfile, on bases built from Debian and PyPI packages (images/build_bases.sh),
# with podman; reused while their inputs are unchanged. Prints build times and sizes.
# Needs root, podman, runc and mmdebstrap (.ci/run installs them).
images: setup
	PIP="$(abspath $(VENV))/bin/pip" images/build.sh

unit: setup jvm controlplane helm kubelet
	$(PY) -m pytest tests --durations=30

test: lint typecheck contracts images unit

bench: setup jvm controlplane
	$(PY) -m bench

clean:
	rm -rf $(VENV) $(RUN_VENV) .mypy_cache .ruff_cache .pytest_cache
