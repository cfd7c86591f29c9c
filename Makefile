# cronoq's developer entry points. The two that matter: `make demo` and `make test`.
# Everything a target needs is installed by the target itself (Python packages into .venv,
# the test control plane into ~/.cache/cronoq), so both work on a fresh machine.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
CLUSTER := $(PYTHON) hack/devcluster.py
export KUBECONFIG := $(CURDIR)/.cluster/kubeconfig
export PATH := $(CURDIR)/.cluster/bin:$(PATH)

.PHONY: demo test unit integration cluster-build cluster-up cluster-down cluster-status crds check-crds install-crds bench clean

## demo: start the local cluster and show how to use it
demo: $(BIN)/.installed cluster-up
	@echo
	@echo "The test cluster is up. Use it with:"
	@echo "  export KUBECONFIG=$(KUBECONFIG) PATH=$(CURDIR)/.cluster/bin:\$$PATH"
	@echo "  kubectl get nodes"
	@echo "The operator does not exist yet; once it does, this target will install the CRDs,"
	@echo "run it and apply examples/."

## test: install what the tests need, then run every test (the cluster starts and stops itself)
test: $(BIN)/.installed
	$(BIN)/pytest -q

## unit: the pure tests only, no cluster
unit: $(BIN)/.installed
	$(BIN)/pytest -q tests/unit

integration: $(BIN)/.installed
	$(BIN)/pytest -q tests/integration

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $@

cluster-build:
	$(CLUSTER) build

cluster-up:
	$(CLUSTER) up

cluster-down:
	$(CLUSTER) down

cluster-status:
	$(CLUSTER) status

## crds: regenerate crds/ from the models in operator/cronoq/api
crds: $(BIN)/.installed
	$(BIN)/python -m cronoq.api.crdgen

## check-crds: fail if crds/ drifted from the models
check-crds: $(BIN)/.installed
	$(BIN)/python -m cronoq.api.crdgen --check

## install-crds: install or upgrade the CRDs in the cluster KUBECONFIG points at
install-crds:
	kubectl apply --server-side --force-conflicts -f crds/

clean: cluster-down
	rm -rf $(VENV) .cluster .pytest_cache .hypothesis
