# taskenv — `make help` lists the targets.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3

.DEFAULT_GOAL := help

help: ## List the targets
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{n[NR] = $$1; d[NR] = $$2; if (length($$1) > w) w = length($$1)} END {for (i = 1; i <= NR; i++) printf "  %-" w "s  %s\n", n[i], d[i]}'

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,dev]'
	touch $@

install: $(VENV)/.installed ## Create the virtualenv and install taskenv with its test tools

# Each runs the host set-up first, every time: it installs (Debian, as root) only what is
# missing, by its own dpkg and version checks, so a machine that has everything pays well
# under a second; not root, it prints the sudo command and stops.
run: install ## Run the whole stack: Redis (unless TASKENV_REDIS_URL is set), API, one worker per queue
	deploy/host/setup.sh run
	$(PY) -m workers.localstack

# One more worker, started as make run starts each of its own; as many per queue as load
# needs.  It reaches the platform by TASKENV_* settings, else by the make run in this
# directory (var/), and refuses to start without what its queue needs.
worker: install ## One more worker for QUEUE=validate|policy|launch (CONCURRENCY=n), on the platform's Redis
	$(PY) -m workers.worker $(QUEUE) $(if $(CONCURRENCY),--concurrency $(CONCURRENCY))

# The markers of the tests that start real processes (servers, sandboxes, containers, a
# browser) or take long: the inner loop leaves them out.
HEAVY := integration or podman or browser or compose or sandbox or slurm or kubectl or slow or docs or torch

# In two parts, which between them run every test once: the unit and API tests spread over
# two processes, then the tests of real processes one at a time (their timings and
# fault-injection are written for a machine running one of them).  Both always run; the
# target fails if either did.
test: install ## Run the test suite (unit, API and integration with real Redis, Celery, podman, Slurm)
	deploy/host/setup.sh test
	$(PY) -m pytest -n 2 -m "not ($(HEAVY))"; unit=$$?; \
	$(PY) -m pytest -m "$(HEAVY)"; real=$$?; \
	exit $$(( unit != 0 ? unit : real ))

# The inner loop: no real processes, containers or browser; fewer generated examples,
# spread over the machine's cores.  Compiled modules are cached even where
# PYTHONDONTWRITEBYTECODE is set (as in many container images): rewriting the test
# modules' asserts is otherwise half of each worker's collection, on every run.  The
# OpenAPI fuzzer (slow) is not even collected: building its cases takes seconds per worker.
check: install ## Run the unit and API tests only (about a minute on a quiet 2-core machine)
	PYTHONDONTWRITEBYTECODE= TASKENV_CHECK=1 $(PY) -m pytest -q -p no:cacheprovider \
		--hypothesis-profile=check -n auto -p no:schemathesis \
		-m "not ($(HEAVY))" \
		--ignore=tests/integration --ignore=tests/faults --ignore=tests/compose --ignore=tests/docs \
		--ignore=tests/api/test_schemathesis.py

lint: install ## ruff, mypy and the import contracts (layers, forbidden imports, independence)
	$(PY) -m ruff check .
	$(PY) -m mypy api workers shared
	$(VENV)/bin/lint-imports

example: install ## Run the multi-script example against a running stack
	$(PY) examples/run_example.py

# Also part of `make test`; this runs it alone (tests/docs/runner.py says how).
docs-test: install ## Run the docs' shell blocks in reading order on one real stack (summary at the end)
	$(PY) -m pytest -q -p no:cacheprovider tests/docs

clean: ## Remove the virtualenv and local task directories
	rm -rf $(VENV) var .pytest_cache .hypothesis

.PHONY: help install run worker test check lint example docs-test clean

image: ## Build the local runtime image for the podman launcher (FORCE=1 rebuilds it)
	deploy/image/build.sh

pytorch-image: ## Build localhost/taskenv-pytorch:2.13 (Debian python3 + torch 2.13.0 CPU, no registry; its tree is a runtime directory too)
	deploy/image/build-pytorch.sh

.PHONY: image pytorch-image

compose-image: ## Build the services' image from Debian packages, no registry (FORCE=1 rebuilds the base)
	deploy/image/build-taskenv.sh

# Also part of `make test`; this runs it alone.
compose-test: install ## Build the images and run docker-compose.yml with podman-compose, launch scaled to 3
	$(PY) -m pytest -m compose tests/compose

.PHONY: compose-image compose-test

# The image deploy/k8s runs: the same build as compose-image (wheels built here, the
# Debian base from Debian packages), tagged for your registry and pushed with PUSH=1.
K8S_IMAGE ?= localhost/taskenv:latest
k8s-image: ## Build the image deploy/k8s runs: make k8s-image K8S_IMAGE=registry.example.com/taskenv:1.0.0 PUSH=1
	IMAGE=$(K8S_IMAGE) deploy/image/build-taskenv.sh
	@if [ "$(PUSH)" = 1 ]; then podman push $(K8S_IMAGE); else echo "push it: podman push $(K8S_IMAGE) (or PUSH=1)"; fi

k8s-render: ## Render the example overlay as kubectl apply -k would (K8S_OVERLAY=deploy/k8s/overlays/NAME)
	kubectl kustomize $(or $(K8S_OVERLAY),deploy/k8s/overlays/example)

.PHONY: k8s-image k8s-render

bench: install ## Benchmark the pipeline against a bare Celery pipeline (BENCH_ARGS=--quick for a short run)
	$(PY) -m pip install -q -r bench/requirements.txt && $(PY) -m bench $(BENCH_ARGS)

.PHONY: bench
