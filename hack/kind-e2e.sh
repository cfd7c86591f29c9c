#!/usr/bin/env bash
# End to end on a kind cluster (.github/workflows/e2e.yml), with real containers.
#
#   bash hack/kind-e2e.sh install       # load cronoq/operator:e2e into kind, install the chart,
#                                       # run a task whose first attempt fails for real
#   bash hack/kind-e2e.sh integration   # the integration suite against the same cluster
#
# Needs: a kind cluster named $KIND_CLUSTER whose kubeconfig is current, the image
# $IMAGE built into the local docker, kubectl, helm, python3 and Go (for kwok).
#
# The integration suite plays its pods with kwok (annotations choose exit codes and delays), so
# kwok runs here against kind's API server with fake nodes, and the real node is tainted so that
# only pods that tolerate the taint (the operator's, the smoke task's) run on it.
set -euo pipefail
cd "$(dirname "$0")/.."

KIND_CLUSTER=${KIND_CLUSTER:-cronoq-e2e}
IMAGE=${IMAGE:-cronoq/operator:e2e}
NS=cronoq-system
WATCHED=cronoq-e2e
TAINT=cronoq.io/real-node
KUBECONFIG=${KUBECONFIG:-$HOME/.kube/config}
export KUBECONFIG

install() {
    kind load docker-image "$IMAGE" --name "$KIND_CLUSTER"
    # Only pods that tolerate this run on the real node; kwok's fake nodes take the rest.
    kubectl taint nodes --all "$TAINT=true:NoSchedule" --overwrite
    kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f -
    kubectl label namespace "$NS" pod-security.kubernetes.io/enforce=restricted --overwrite
    kubectl create namespace "$WATCHED" --dry-run=client -o yaml | kubectl apply -f -
    helm install cronoq charts/cronoq --namespace "$NS" --wait --timeout 5m \
        --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" --set image.pullPolicy=Never \
        --set-json "watchNamespaces=[\"$WATCHED\"]" \
        --set-json "tolerations=[{\"key\":\"$TAINT\",\"operator\":\"Exists\",\"effect\":\"NoSchedule\"}]" \
        --set defaultPool.create=true
    kubectl -n "$NS" rollout status deployment/cronoq --timeout=180s

    # A task that really runs: attempt 1 exits 1, attempt 2 succeeds, on the real node.
    kubectl -n "$WATCHED" apply -f - <<EOF
apiVersion: cronoq.io/v1alpha1
kind: Task
metadata:
  name: flaky
spec:
  image: $IMAGE
  command: [python3, -c, 'import os, sys; sys.exit(0 if int(os.environ["CRONOQ_ATTEMPT"]) >= 2 else 1)']
  tolerations: [{key: $TAINT, operator: Exists, effect: NoSchedule}]
  retry: {maxAttempts: 3, initialBackoff: 1s, jitter: none}
EOF
    kubectl -n "$WATCHED" wait task/flaky --for=jsonpath='{.status.phase}'=Succeeded --timeout=300s
    attempt=$(kubectl -n "$WATCHED" get task/flaky -o jsonpath='{.status.attempt}')
    if [ "$attempt" != 2 ]; then
        echo "task flaky succeeded on attempt $attempt, expected 2" >&2
        exit 1
    fi
    kubectl -n "$WATCHED" get tasks
}

integration() {
    python3 hack/devcluster.py build   # kwok (and kubectl, helm) from the pinned Go modules
    bin=.cluster/bin
    python3 - > .cluster/kind-nodes.json <<'EOF'
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("devcluster", "hack/devcluster.py")
dc = importlib.util.module_from_spec(spec); sys.modules["devcluster"] = dc; spec.loader.exec_module(dc)
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": [dc.node_manifest(i) for i in range(dc.NODES)]}))
EOF
    python3 - > .cluster/kwok-logs.yaml <<'EOF'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("devcluster", "hack/devcluster.py")
dc = importlib.util.module_from_spec(spec); sys.modules["devcluster"] = dc; spec.loader.exec_module(dc)
print(dc.pod_logs().read_text())
EOF
    "$bin/kwok" --kubeconfig="$KUBECONFIG" --config=hack/kwok-stages.yaml --config=.cluster/kwok-logs.yaml \
        --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
        --node-ip=127.0.0.1 --cidr=10.244.0.1/16 > .cluster/kwok-kind.log 2>&1 &
    kwok_pid=$!
    trap 'kill "$kwok_pid" 2>/dev/null || true' EXIT
    kubectl apply -f .cluster/kind-nodes.json
    kubectl wait --for=condition=Ready node -l type=kwok --timeout=120s
    make .venv/bin/.installed
    # The fault tests restart control-plane processes and test_devcluster checks the local
    # cluster itself: neither applies to kind.
    CRONOQ_KUBECONFIG="$KUBECONFIG" CRONOQ_KUBECTL="$(command -v kubectl)" .venv/bin/pytest -q tests/integration \
        --ignore=tests/integration/faults --ignore=tests/integration/test_devcluster.py
}

"$@"
