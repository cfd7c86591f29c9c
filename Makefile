# cronoq's developer entry points. The two that matter: `make demo` and `make test`.
# Everything a target needs is installed by the target itself (Python packages into .venv,
# the test control plane into ~/.cache/cronoq), so both work on a fresh machine.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
CLUSTER := $(PYTHON) hack/devcluster.py
export KUBECONFIG := $(CURDIR)/.cluster/kubeconfig
export PATH := $(CURDIR)/.cluster/bin:$(PATH)
# REAL_NODE=1 (`make cluster-up REAL_NODE=1`, `make demo REAL_NODE=1`) adds a real node (kubelet,
# containerd, runc) beside the kwok ones: hack/realnode.py.
REAL_NODE ?= 0
export CRONOQ_REAL_NODE := $(REAL_NODE)

.PHONY: demo operator-up constraints test lint actionlint image faults exactly-once go-tools test-tools unit integration cluster-build cluster-up cluster-down cluster-status crds check-crds install-crds bench docs docs-serve reference-docs clean

# examples/real-node/ needs real containers (`make cluster-up REAL_NODE=1`, then apply it yourself)
KWOK_EXAMPLES := $(shell find examples -name '*.yaml' -not -path 'examples/real-node/*' | sort)

## demo: start the local cluster, install the CRDs, run the operator and apply examples/
demo: $(BIN)/.installed cluster-up install-crds operator-up
	kubectl apply $(addprefix -f ,$(KWOK_EXAMPLES))
	@$(BIN)/python hack/await_tasks.py --timeout 120
	@echo
	@echo "The operator runs in the background, on the default namespace (log: .cluster/logs/operator.log; metrics: http://127.0.0.1:21090/metrics)."
	@echo "Use the cluster with:"
	@echo "  export KUBECONFIG=$(KUBECONFIG) PATH=$(CURDIR)/.cluster/bin:\$$PATH"
	@echo "  kubectl get tasks,taskpools"
	@echo "  cronoq history --archive sqlite:///$(CURDIR)/.cluster/archive.db   # every ended attempt, deleted tasks too"
	@echo "Stop everything with: make cluster-down"

## operator-up: run the operator in the background against the local cluster (one trusted user: it
## serves Workers pools without the chart's lease guard, --trust-worker-leases)
operator-up: $(BIN)/.installed
	@mkdir -p .cluster/run .cluster/logs
	@if [ -f .cluster/run/operator.pid ] && kill -0 $$(cat .cluster/run/operator.pid) 2>/dev/null; then \
		echo "operator already running (pid $$(cat .cluster/run/operator.pid))"; \
	else \
		nohup $(BIN)/cronoq operator --namespace default --lease-name cronoq-demo --metrics-port 21090 --probe-port 21080 --trust-worker-leases --archive sqlite:///$(CURDIR)/.cluster/archive.db >> .cluster/logs/operator.log 2>&1 & \
		echo $$! > .cluster/run/operator.pid; \
		echo "operator started (pid $$!)"; \
	fi

## test: install what the tests need, check the layers and the lint, then run every test (the
## cluster starts and stops itself)
test: $(BIN)/.installed go-tools test-tools image lint
	$(BIN)/pytest -q

## lint: the layer contracts (import-linter, pyproject.toml), mypy (strict on cronoq.api and
## cronoq.engine, [tool.mypy] in pyproject.toml) and ruff
lint: $(BIN)/.installed actionlint
	cd operator && ../$(BIN)/lint-imports --config ../pyproject.toml
	$(BIN)/mypy
	$(BIN)/ruff check .
	$(ACTIONLINT) -no-color

## actionlint: build (or find cached) actionlint from its Go module into ~/.cache/cronoq
ACTIONLINT_VERSION := v1.7.12
ACTIONLINT := $(HOME)/.cache/cronoq/actionlint-$(ACTIONLINT_VERSION)/actionlint
actionlint: $(ACTIONLINT)
$(ACTIONLINT):
	GOBIN=$(dir $@).partial CGO_ENABLED=0 go install github.com/rhysd/actionlint/cmd/actionlint@$(ACTIONLINT_VERSION)
	mv $(dir $@).partial/actionlint $@ && rmdir $(dir $@).partial

## image: build the operator image and the worker example's image (podman or docker, whichever
## works here; podman is installed from Debian's packages when missing), tagged
## localhost/cronoq/operator:dev and localhost/cronoq/worker-example:dev (CRONOQ_IMAGE overrides)
image:
	$(PYTHON) hack/image.py build

## go-tools: build (or find cached) the control plane, the oldest supported one (hack/controlplane-1.31,
## tests/versions), Kueue's controller manager (bench/peers/kueue: tests/integration/test_kueue.py), toxiproxy, Prometheus and promtool
## (hack/prometheus: the chart's alert tests and the real-Prometheus test), Jaeger (hack/jaeger: the
## tracing test) and the real node's
## kubelet and containerd (with Debian's runc and CNI plugins), and warm the Go cache of the PromQL
## checker, before pytest, so a cold build never runs inside a test's time limit
go-tools:
	$(CLUSTER) build
	$(CLUSTER) build jaeger
	CRONOQ_KUBE=1.31 $(CLUSTER) build
	$(PYTHON) -m bench.peers kueue
	$(PYTHON) hack/realnode.py build
	cd tests/chart/promql && go build -mod=readonly -o /dev/null .

## unit: the pure tests only, no cluster
unit: $(BIN)/.installed
	$(BIN)/pytest -q tests/unit

integration: $(BIN)/.installed go-tools test-tools
	$(BIN)/pytest -q tests/integration

## test-tools: install the system tools the tests use besides the control plane (faketime; chromium and
## chromium-driver for the dashboard's browser test), when missing
test-tools:
	$(PYTHON) hack/testtools.py

## faults: the fault tests alone (control-plane restarts, evictions, lost nodes, 410 Gone, clock
## skew, throttling, network faults through toxiproxy); `make test` runs them too
faults: $(BIN)/.installed go-tools test-tools
	CRONOQ_FAULT_RUNS=3 $(BIN)/pytest -q tests/integration/faults

## exactly-once: the exactly-once fault run alone (issue 50; docs/how-to/exactly-once.md): pull workers writing
## fenced and unfenced effects to a real Postgres while workers are killed and cut off and the leader fails
## over, three runs of 400 tasks, then the checker's table; `make test` runs it once with 160
exactly-once: $(BIN)/.installed go-tools test-tools
	CRONOQ_FAULT_RUNS=3 CRONOQ_EFFECT_TASKS=400 CRONOQ_EFFECT_ROUNDS=6 $(BIN)/pytest -q tests/integration/faults/test_exactly_once.py

$(BIN)/.installed: pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test,docs]'
	touch $@

## constraints: pin every package (transitive ones too) at what pyproject.toml's pins resolve to today
constraints:
	rm -rf .cluster/constraints-venv && $(PYTHON) -m venv .cluster/constraints-venv
	.cluster/constraints-venv/bin/pip install --quiet --disable-pip-version-check '.[test,bench,docs]'
	{ sed -n '/^#/p' constraints.txt; .cluster/constraints-venv/bin/pip freeze --exclude cronoq; } > constraints.txt.new
	mv constraints.txt.new constraints.txt && rm -rf .cluster/constraints-venv

cluster-build:
	$(CLUSTER) build

cluster-up:
	$(CLUSTER) up

cluster-down:
	$(CLUSTER) down

cluster-status:
	$(CLUSTER) status

## crds: regenerate crds/ from the models in operator/cronoq/api, and the chart's copy; and the
## chart's protected keys (templates/_protected_keys.tpl) from cronoq.pod_protocol
crds: $(BIN)/.installed
	$(BIN)/python -m cronoq.api.crdgen
	bash charts/sync-crds.sh
	$(BIN)/python -m cronoq.api.keysgen

## check-crds: fail if crds/ drifted from the models, or the chart's protected keys from the pod protocol
check-crds: $(BIN)/.installed
	$(BIN)/python -m cronoq.api.crdgen --check
	$(BIN)/python -m cronoq.api.keysgen --check

## install-crds: install or upgrade the CRDs in the cluster KUBECONFIG points at
install-crds:
	kubectl apply --server-side --force-conflicts -f crds/

## bench: the benchmarks, on a cluster of their own (bench/README.md); BENCH_ARGS=--quick for a short run;
## fails when a figure is outside its range in bench/ranges.yaml
bench: $(BIN)/.installed
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[bench]'
	$(BIN)/python bench/run.py $(BENCH_ARGS)

## docs: build the docs site into site/ (mkdocs.yml; strict: a warning, a broken link or anchor fails it)
docs: $(BIN)/.installed
	$(BIN)/python -m cronoq.api.docgen --check
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

## docs-serve: browse the docs site at http://127.0.0.1:8000, rebuilt as pages change
docs-serve: $(BIN)/.installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --strict --dev-addr 127.0.0.1:8000

## reference-docs: regenerate the field tables of docs/reference/ from the models
reference-docs: $(BIN)/.installed
	$(BIN)/python -m cronoq.api.docgen

clean: cluster-down
	rm -rf $(VENV) .cluster .cluster-* .pytest_cache .hypothesis .mypy_cache site
