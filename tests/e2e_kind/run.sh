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
# The chart ships no secret. Strong ones are generated once per cluster and kept (readable by
# this user only) outside the repository: the bundled PostgreSQL keeps its first password.
SECRETS=${SECRETS:-${XDG_STATE_HOME:-$HOME/.local/state}/dlaas-e2e/$CLUSTER-secrets.yaml}
if [ ! -s "$SECRETS" ]; then
  (umask 077 && mkdir -p "$(dirname "$SECRETS")" && "$PYTHON" - > "$SECRETS" <<'PY'
import secrets
hex32 = lambda: secrets.token_hex(32)  # quoted below: YAML must not read one as a number
print(f'adminToken: "{hex32()}"')
print(f'postgresql: {{password: "{hex32()}"}}')
print(f'redis: {{password: "{hex32()}"}}')
print(f's3: {{accessKey: "{secrets.token_hex(20)}", secretKey: "{hex32()}"}}')
PY
  )
fi
if command -v helm >/dev/null; then
  helm --kube-context "$CONTEXT" upgrade --install dlaas helm/dlaas -n "$NAMESPACE" \
    -f tests/e2e_kind/values-kind.yaml -f "$SECRETS" --wait --timeout 10m
else
  HOME=$(mktemp -d) "$PYTHON" - "$NAMESPACE" "$SECRETS" <<'PY' | kubectl --context "$CONTEXT" -n "$NAMESPACE" apply -f -
import sys, yaml
from helm_python import chart
def merged(a, b):
    return {**a, **{k: merged(a[k], v) if isinstance(v, dict) and isinstance(a.get(k), dict) else v
                    for k, v in b.items()}}
values = merged(yaml.safe_load(open("tests/e2e_kind/values-kind.yaml")),
                yaml.safe_load(open(sys.argv[2])))
rendered = chart.Chart.load("helm/dlaas").render(values, name="dlaas", namespace=sys.argv[1])
# Hooks are Helm's to run when their event comes (the shutdown Job at `helm uninstall`):
# applied now, it would stop the platform it was installed with.
objects = [obj for path, text in sorted(rendered.items()) if not path.endswith(".txt")
           for obj in yaml.safe_load_all(text)
           if obj and "helm.sh/hook" not in (obj["metadata"].get("annotations") or {})]
print(yaml.safe_dump_all(objects, sort_keys=False))
PY
fi
for deployment in api worker beat monitor pod-watcher; do
  kubectl --context "$CONTEXT" -n "$NAMESPACE" rollout status "deployment/dlaas-$deployment" --timeout 10m
done

DLAAS_E2E_KUBE_CONTEXT="$CONTEXT" DLAAS_E2E_NAMESPACE="$NAMESPACE" \
  "$PYTHON" -m pytest -p no:cacheprovider -v tests/e2e_kind
