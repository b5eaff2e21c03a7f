# captcha-solver — the two commands are `make demo` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV  := .venv
TOOLS := $(CURDIR)/.tools
export PATH := $(TOOLS)/bin:$(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: help test unit demo venv tools lint e2e e2e-pods bench compatibility clean dashboard dashboard-png

help:
	@echo "make demo   - run the whole thing locally: redis + simulator + workers + producer, with a summary"
	@echo "make unit   - the inner loop: every test not marked slow; lint is make lint"
	@echo "make lint   - ruff, mypy (strict: src, tests, bench, dashboards) and ct lint on the chart (version-bump check)"
	@echo "make test   - install what the tests need (python deps, redis-server, prometheus, helm v3/v4, kubeconform,"
	@echo "              helm-unittest, checkov, hadolint, the CaptchaAI client libraries) and run every test"
	@echo "make compatibility - run the client libraries against the simulator, rewrite docs/compatibility.md"
	@echo "make e2e    - chart on a real kube-apiserver + KEDA operator (builds them into .tools/ once)"
	@echo "make e2e-pods - chart + KEDA's chart on a one-node cluster whose pods run: 0 -> N -> 0, helm 3 and 4 (root)"
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
	scripts/ct-lint.sh

test: venv tools lint
	$(VENV)/bin/pytest -q -p no:cacheprovider tests

unit: venv tools
	$(VENV)/bin/pytest -q -p no:cacheprovider -m "not slow" tests

demo: venv
	scripts/install-tools.sh --only redis || echo "redis-server not installable: the demo uses its embedded Redis"
	$(VENV)/bin/captcha-worker demo --tasks $${TASKS:-200}

e2e: venv tools
	tests/e2e/run.sh

e2e-pods: venv tools
	tests/e2e/pods.sh

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
