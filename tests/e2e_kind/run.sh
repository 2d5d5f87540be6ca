#!/usr/bin/env bash
# `make e2e-kind`: a kind cluster with dlaas installed from the chart, then the end-to-end test.
#
# Needs Docker, kind and kubectl on PATH (helm too, or the chart is rendered with the
# helm-python-sdk of the dev environment and applied with kubectl). Reuses the cluster
# `dlaas-e2e` if it exists; KEEP_CLUSTER=0 deletes it afterwards.
set -euo pipefail
cd "$(dirname "$0")/../.."

CLUSTER=${CLUSTER:-dlaas-e2e}
CONTEXT="kind-$CLUSTER"
NAMESPACE=${NAMESPACE:-dlaas}
PYTHON=${PYTHON:-python}
VERSION=$("$PYTHON" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')

for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null || { echo "e2e-kind: $tool is not on PATH" >&2; exit 2; }
done

if ! kind get clusters | grep -qx "$CLUSTER"; then
  kind create cluster --name "$CLUSTER" --wait 120s
fi
if [ "${KEEP_CLUSTER:-1}" = 0 ]; then
  trap 'kind delete cluster --name "$CLUSTER"' EXIT
fi

docker build --target api -t "dlaas-api:$VERSION" .
docker build --target lifecycle-manager -t "dlaas-lifecycle-manager:$VERSION" .
docker build -f learner_image/Dockerfile -t "dlaas-learner:$VERSION" .
for image in dlaas-api dlaas-lifecycle-manager dlaas-learner; do
  kind load docker-image --name "$CLUSTER" "$image:$VERSION"
done

kubectl --context "$CONTEXT" create namespace "$NAMESPACE" --dry-run=client -o yaml \
  | kubectl --context "$CONTEXT" apply -f -
if command -v helm >/dev/null; then
  helm --kube-context "$CONTEXT" upgrade --install dlaas helm/dlaas -n "$NAMESPACE" \
    -f tests/e2e_kind/values-kind.yaml --wait --timeout 10m
else
  HOME=$(mktemp -d) "$PYTHON" - "$NAMESPACE" <<'PY' | kubectl --context "$CONTEXT" -n "$NAMESPACE" apply -f -
import sys, yaml
from helm_python import chart
values = yaml.safe_load(open("tests/e2e_kind/values-kind.yaml"))
rendered = chart.Chart.load("helm/dlaas").render(values, name="dlaas", namespace=sys.argv[1])
print("\n---\n".join(text for path, text in sorted(rendered.items()) if not path.endswith(".txt")))
PY
fi
for deployment in api worker beat monitor pod-watcher; do
  kubectl --context "$CONTEXT" -n "$NAMESPACE" rollout status "deployment/dlaas-$deployment" --timeout 10m
done

DLAAS_E2E_KUBE_CONTEXT="$CONTEXT" DLAAS_E2E_NAMESPACE="$NAMESPACE" DLAAS_E2E_TOKEN=e2e-admin-token \
  "$PYTHON" -m pytest -p no:cacheprovider -v tests/e2e_kind
