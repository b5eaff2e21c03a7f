# captcha-solver — the two commands are `make demo` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV  := .venv
TOOLS := $(CURDIR)/.tools
export PATH := $(TOOLS)/bin:$(CURDIR)/$(VENV)/bin:$(PATH)
# The test tiers (markers in pyproject.toml; tests/test_tiers.py gives every test file one). PYTEST_ARGS: more
# pytest options (.ci/run passes --durations=10); JOBS: pytest-xdist workers of the fast tier (each starts its own
# redis-server and stacks), 2 for this project's 2-core machines.
TIER_FAST := not integration and not chaos and not release
TIER_INTEGRATION := integration
TIER_CHAOS := chaos
TIER_RELEASE := release
PYTEST := $(VENV)/bin/pytest -q -p no:cacheprovider
PYTEST_ARGS ?=
JOBS ?= 2

.PHONY: help test unit integration chaos test-stress demo venv tools lint e2e e2e-pods bench compatibility clean dashboard dashboard-png release test-release

help:
	@echo "make demo   - run the whole thing locally: redis + simulator + workers + producer, with a summary"
	@echo "make test   - install what the tests need (python deps, redis-server, prometheus, helm v3/v4, kubeconform,"
	@echo "              helm-unittest, checkov, hadolint, the CaptchaAI client libraries), make lint, the fast tier"
	@echo "make unit   - the inner loop: the fast tier without lint"
	@echo "make lint   - ruff, mypy (strict: src, tests, bench, dashboards), luacheck on the Redis scripts and ct lint on"
	@echo "              the chart (version-bump check)"
	@echo "make integration - the slower tier: Prometheus, Sentinel/Cluster, client libraries, shares flood, bench smoke"
	@echo "make chaos  - the chaos suite (tests/chaos): processes under faults and hostile input"
	@echo "make test-stress - make test with two busy-loop processes beside it (both cores loaded)"
	@echo "make compatibility - run the client libraries against the simulator, rewrite docs/compatibility.md"
	@echo "make e2e    - chart on a real kube-apiserver + KEDA operator (builds them into .tools/ once)"
	@echo "make e2e-pods - chart + KEDA's chart on a one-node cluster whose pods run: 0 -> N -> 0, helm 3 and 4 (root)"
	@echo "make release REGISTRY=host:port - signed image (digest-pinned), SBOM and signed chart pushed to an OCI registry"
	@echo "              (RELEASE_KEYS=DIR or RELEASE_KEYS=generate; root: buildah; docs/operations.md)"
	@echo "make test-release - make release against a real registry on 127.0.0.1, then helm pull --verify / cosign verify (root)"
	@echo "make bench  - benchmarks; results in bench/results/, quoted in docs/benchmarks.md"
	@echo "make dashboard     - regenerate the Grafana dashboard JSON and its docs from dashboards/ (code)"
	@echo "make dashboard-png - draw docs/img/dashboard.png from a real Prometheus scraping a demo run (~4 min)"

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml scripts/bootstrap-python.sh
	scripts/bootstrap-python.sh
	@touch $@

tools: venv
	scripts/install-tools.sh
	scripts/chart-dependency.sh

lint: venv tools
	$(VENV)/bin/ruff check src tests bench dashboards scripts
	$(VENV)/bin/mypy
	$(VENV)/bin/python scripts/lint-lua.py
	scripts/ct-lint.sh

test: venv tools lint
	$(PYTEST) -n $(JOBS) --dist loadscope -m "$(TIER_FAST)" $(PYTEST_ARGS) tests

unit: venv tools
	$(PYTEST) -n $(JOBS) --dist loadscope -m "$(TIER_FAST)" $(PYTEST_ARGS) tests

integration: venv tools
	$(VENV)/bin/python -m bench.venvs  # the benchmark peers' venvs (bench smoke), built apart from its timed run
	$(PYTEST) -m "$(TIER_INTEGRATION)" $(PYTEST_ARGS) tests

chaos: venv tools
	$(PYTEST) -m "$(TIER_CHAOS)" $(PYTEST_ARGS) tests/chaos

test-stress: venv tools
	scripts/test-stress.sh

demo: venv
	scripts/install-tools.sh --only redis || echo "redis-server not installable: the demo uses its embedded Redis"
	$(VENV)/bin/captcha-worker demo --tasks $${TASKS:-200}

e2e: venv tools
	tests/e2e/run.sh

e2e-pods: venv tools
	tests/e2e/pods.sh

release: venv tools
	scripts/install-tools.sh --only release
	REGISTRY="$(REGISTRY)" scripts/release.sh

test-release: venv tools
	scripts/install-tools.sh --only release
	$(PYTEST) -m "$(TIER_RELEASE)" $(PYTEST_ARGS) tests/test_release.py

compatibility: venv
	scripts/install-tools.sh --only clients
	$(VENV)/bin/python -m tests.clients.compat --write

bench: venv tools
	$(VENV)/bin/python -m bench.run

dashboard: venv
	$(VENV)/bin/python -m dashboards build

dashboard-png: venv
	scripts/install-tools.sh --only redis,prometheus
	$(VENV)/bin/python -m dashboards render

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build dist src/*.egg-info
