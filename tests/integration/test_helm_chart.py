"""The Helm chart: lint-clean, and everything it renders, with the default, with full values
and with a fixed-size control plane, valid for Kubernetes 1.30 and 1.37 (strict); the
settings it wires are dlaas's. It ships no secret: without strong ones given, it refuses to
render and names the fix. Its autoscalers scale the API on CPU and the workers on the queue
gauge the API serves; its disruption budgets never hold a drain. `helm uninstall` first runs
its shutdown hook, which stops the workers, the learners and the monitor in that order with
no more rights than that takes."""

from __future__ import annotations

import copy
import hashlib
import json
import re
import secrets
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import kubernetes_validate
import pytest
import yaml

from api.routes import system
from cli.secrets import KNOWN_DEFAULTS
from lifecycle_manager.backends.kubernetes import shutdown
from lifecycle_manager.decisions.shutdown_order import selects
from storage.settings import Settings
from tests.heartbeat_probe import (
    assert_beat_refreshes_its_heartbeat,
    assert_probe_tells_a_stale_heartbeat,
)
from tests.kube import rbac
from tests.redis_bounds import maxmemory_of

CHART = Path(__file__).resolve().parents[2] / "helm" / "dlaas"
VERSIONS = ("1.30.0", "1.37.0")
RELEASE = "dlaas"
NAMESPACE = "dlaas-system"

# What an installation gives the chart: `--set adminToken=$(openssl rand -hex 32)` and so on.
SECRETS: dict[str, Any] = {
    "adminToken": secrets.token_hex(32),
    "postgresql": {"password": secrets.token_hex(32)},
    "redis": {"password": secrets.token_hex(32)},
    "s3": {"accessKey": secrets.token_hex(20), "secretKey": secrets.token_hex(32)},
}
SECRET_VALUES = [
    "adminToken",
    "postgresql.password",
    "redis.password",
    "s3.accessKey",
    "s3.secretKey",
]


def merged(*layers: dict[str, Any]) -> dict[str, Any]:
    """Values files given one after the other (`-f a -f b`): later keys win, maps merge."""
    result: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, dict) and isinstance(result.get(key), dict):
                result[key] = merged(result[key], value)
            else:
                result[key] = copy.deepcopy(value)
    return result


def with_value(path: str, value: Any) -> dict[str, Any]:
    """The chart's secrets with `path` (dotted) set to `value` (None: left out)."""
    values = copy.deepcopy(SECRETS)
    *parents, last = path.split(".")
    holder = values
    for key in parents:
        holder = holder[key]
    if value is None:
        del holder[last]
    else:
        holder[last] = value
    return values


FULL_VALUES: dict[str, Any] = {
    "images": {"pullPolicy": "Always", "pullSecrets": [{"name": "regcred"}]},
    "api": {
        "ingress": {
            "enabled": True,
            "className": "nginx",
            "host": "dlaas.example.com",
            "annotations": {"nginx.ingress.kubernetes.io/proxy-body-size": "256m"},
            "tls": [{"secretName": "dlaas-tls", "hosts": ["dlaas.example.com"]}],
        },
        "service": {"type": "LoadBalancer"},
        # behind the ingress, every connection comes from its controller's few addresses
        "http": {"maxConnectionsPerAddress": 4096, "headerTimeoutSeconds": 5},
        "autoscaling": {
            "maxReplicas": 6,
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 600}},
        },
    },
    "worker": {
        "autoscaling": {
            "queueLength": {
                "selector": {"queue": "celery", "app_kubernetes_io_instance": RELEASE},
                "tasksPerWorker": 3,
            },
            "targetCPUUtilizationPercentage": 80,
            "behavior": {
                "scaleUp": {"policies": [{"type": "Pods", "value": 2, "periodSeconds": 60}]}
            },
        }
    },
    "podDisruptionBudget": {"maxUnavailable": "25%"},
    "learners": {
        "namespace": "dlaas-learners",
        "nodeSelector": {"nvidia.com/gpu.present": "true"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    },
    "extraEnv": {"DLAAS_MAX_ARCHIVE_BYTES": "536870912"},
    "serviceAccount": {"annotations": {"iam.example.com/role": "dlaas"}},
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "dlaas"}],
    "affinity": {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 1,
                    "preference": {
                        "matchExpressions": [
                            {"key": "pool", "operator": "In", "values": ["control"]}
                        ]
                    },
                }
            ]
        }
    },
}
EXTERNAL_VALUES: dict[str, Any] = {
    "existingSecret": "dlaas-credentials",
    "postgresql": {"enabled": False, "externalUrl": "postgresql+asyncpg://u:p@db:5432/dlaas"},
    "redis": {"enabled": False, "externalUrl": "redis://redis:6379/0"},
    "s3": {"enabled": False, "endpoint": "https://s3.example.com"},
    "api": {"autoscaling": {"enabled": False}, "replicas": 2},
    "worker": {"autoscaling": {"enabled": False}, "replicas": 3},
    "learners": {"gangAdmission": False},
}
# A control plane of fixed size: no autoscalers, no disruption budgets.
FIXED_VALUES: dict[str, Any] = {
    "api": {"autoscaling": {"enabled": False}, "replicas": 2, "scrapeAnnotations": False},
    "worker": {"autoscaling": {"enabled": False}, "replicas": 3},
    "podDisruptionBudget": {"enabled": False},
}


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    home = tmp_path_factory.mktemp("helm-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(home))
        patch.setenv("HELM_CACHE_HOME", str(home / "cache"))
        patch.setenv("HELM_CONFIG_HOME", str(home / "config"))
        patch.setenv("HELM_DATA_HOME", str(home / "data"))
        import helm_python

        yield helm_python


def render(helm: Any, values: dict[str, Any]) -> list[dict[str, Any]]:
    chart = helm.chart.Chart.load(str(CHART))
    rendered = chart.render(values, name=RELEASE, namespace=NAMESPACE)
    objects = []
    for path, text in sorted(rendered.items()):
        if path.endswith(".txt"):
            continue
        objects += [obj for obj in yaml.safe_load_all(text) if obj]
    return objects


@pytest.fixture(scope="module")
def rendered(helm: Any) -> dict[str, list[dict[str, Any]]]:
    return {
        "default": render(helm, SECRETS),
        "full": render(helm, merged(SECRETS, FULL_VALUES)),
        "external": render(helm, EXTERNAL_VALUES),
        "fixed": render(helm, merged(SECRETS, FIXED_VALUES)),
    }


def by_kind(objects: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(obj["kind"], obj["metadata"]["name"]): obj for obj in objects}


def is_hook(obj: dict[str, Any]) -> bool:
    return "helm.sh/hook" in (obj["metadata"].get("annotations") or {})


@pytest.mark.parametrize(
    "values",
    [SECRETS, merged(SECRETS, FULL_VALUES), EXTERNAL_VALUES, merged(SECRETS, FIXED_VALUES)],
    ids=["default", "full", "external", "fixed"],
)
def test_lint_is_clean(helm: Any, values: dict[str, Any]) -> None:
    report = helm.chart.lint(str(CHART), values, strict=True, namespace=NAMESPACE)
    assert report["errors"] == []
    assert report["messages"] == []


def test_every_distinct_object_validates_strictly(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    seen: set[str] = set()
    kinds: set[str] = set()
    failures = []
    for objects in rendered.values():
        for obj in objects:
            digest = hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()
            if digest in seen:
                continue  # the same object in another rendering: validated once
            seen.add(digest)
            kinds.add(obj["kind"])
            for version in VERSIONS:
                try:
                    kubernetes_validate.validate(obj, version, strict=True)
                except kubernetes_validate.ValidationError as error:
                    failures.append(f"{obj['kind']} {obj['metadata']['name']} ({version}): {error}")
    assert not failures, "\n".join(failures)
    assert {"Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Job"} <= kinds


def test_the_default_release_has_every_component(rendered: dict[str, list[dict[str, Any]]]) -> None:
    names = set(by_kind(rendered["default"]))
    for component in ("api", "worker", "beat", "monitor", "pod-watcher", "redis"):
        assert ("Deployment", f"{RELEASE}-{component}") in names
    for component in ("postgresql", "s3"):
        assert ("StatefulSet", f"{RELEASE}-{component}") in names
    assert ("HorizontalPodAutoscaler", f"{RELEASE}-api") in names
    assert ("HorizontalPodAutoscaler", f"{RELEASE}-worker") in names
    assert ("Ingress", f"{RELEASE}-api") in set(by_kind(rendered["full"]))
    external = set(by_kind(rendered["external"]))
    assert not {name for kind, name in external if kind == "StatefulSet"}
    assert ("Secret", RELEASE) not in external
    assert ("ClusterRole", f"{RELEASE}-{NAMESPACE}-capacity") not in external


def test_images_probes_and_security(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = by_kind(rendered["default"])
    for component in ("api", "worker", "beat", "monitor", "pod-watcher"):
        pod = objects[("Deployment", f"{RELEASE}-{component}")]["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        [container] = pod["containers"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["resources"]["requests"]
        expected = "dlaas-api:0.1.0" if component == "api" else "dlaas-lifecycle-manager:0.1.0"
        assert container["image"] == expected
    api = objects[("Deployment", f"{RELEASE}-api")]["spec"]["template"]["spec"]["containers"][0]
    assert api["readinessProbe"]["httpGet"]["path"] == "/healthz"


@pytest.mark.parametrize("component", ["beat", "monitor", "pod-watcher"])
def test_beat_monitor_and_pod_watcher_are_probed_on_their_heartbeat(
    rendered: dict[str, list[dict[str, Any]]], component: str, tmp_path: Path
) -> None:
    pod = by_kind(rendered["default"])[("Deployment", f"{RELEASE}-{component}")]["spec"]
    [container] = pod["template"]["spec"]["containers"]
    env = {item["name"]: item.get("value") for item in container["env"]}
    heartbeat = PurePosixPath(env["DLAAS_LIVENESS_FILE"])
    mounts = [PurePosixPath(mount["mountPath"]) for mount in container["volumeMounts"]]
    assert any(heartbeat.is_relative_to(mount) for mount in mounts)  # writable: a volume
    for kind in ("startupProbe", "livenessProbe"):
        probe = container[kind]["exec"]["command"]
        assert probe[:4] == ["python", "-m", "lifecycle_manager.liveness", str(heartbeat)]
        assert probe[4] == "--max-age" and 10 <= float(probe[5]) <= 300
    liveness = container["livenessProbe"]
    assert liveness["periodSeconds"] * liveness["failureThreshold"] <= 120
    if component == "beat":
        assert_beat_refreshes_its_heartbeat(container["command"])

    assert_probe_tells_a_stale_heartbeat(container["livenessProbe"]["exec"]["command"], tmp_path)


def test_the_bundled_s3_server_requires_the_credentials_dlaas_uses(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = by_kind(rendered["default"])
    secret = objects[("Secret", RELEASE)]["stringData"]
    [server] = objects[("StatefulSet", f"{RELEASE}-s3")]["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item["valueFrom"]["secretKeyRef"] for item in server["env"]}
    for variable, key in [
        ("AWS_ACCESS_KEY_ID", "DLAAS_S3_ACCESS_KEY"),
        ("AWS_SECRET_ACCESS_KEY", "DLAAS_S3_SECRET_KEY"),
    ]:
        assert env[variable] == {"name": RELEASE, "key": key}
        assert secret[key]  # what the control plane and the learners sign with


def test_the_role_allows_what_the_backend_does_and_no_more(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = by_kind(rendered["full"])
    role = objects[("Role", f"{RELEASE}-learners")]
    assert role["metadata"]["namespace"] == "dlaas-learners"
    granted = {
        resource: set(rule["verbs"]) for rule in role["rules"] for resource in rule["resources"]
    }
    assert granted == rbac.NAMESPACED
    capacity = objects[("ClusterRole", f"{RELEASE}-{NAMESPACE}-capacity")]
    cluster_wide = {
        resource: set(rule["verbs"]) for rule in capacity["rules"] for resource in rule["resources"]
    }
    assert cluster_wide == rbac.CLUSTER_WIDE


def test_the_config_map_is_settings_dlaas_reads(
    rendered: dict[str, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = by_kind(rendered["full"])[("ConfigMap", RELEASE)]["data"]
    for key, value in data.items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    assert settings.cluster_backend == "kubernetes"
    assert settings.kube_namespace == "dlaas-learners"
    assert settings.kube_node_selector == {"nvidia.com/gpu.present": "true"}
    assert settings.kube_tolerations[0]["key"] == "nvidia.com/gpu"
    assert settings.kube_learner_gpu_image == "dlaas-learner:0.1.0-cuda"
    assert settings.s3_endpoint_url == f"http://{RELEASE}-s3.{NAMESPACE}.svc:8333"
    assert settings.max_archive_bytes == 536870912
    # learner pods may reach this release's redis, s3 and api pods
    assert settings.kube_platform_namespace == NAMESPACE
    assert settings.kube_learner_egress_cidrs == []
    assert settings.kube_learner_ephemeral_storage == "50Gi"


@pytest.mark.parametrize(
    ("rendering", "per_address", "header_timeout_s"), [("default", 256, 10), ("full", 4096, 5)]
)
def test_the_api_closes_idle_connections_and_caps_them_as_the_values_say(
    rendered: dict[str, list[dict[str, Any]]],
    monkeypatch: pytest.MonkeyPatch,
    rendering: str,
    per_address: int,
    header_timeout_s: float,
) -> None:
    objects = by_kind(rendered[rendering])
    for key, value in objects[("ConfigMap", RELEASE)]["data"].items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    assert settings.http_header_timeout_s == header_timeout_s
    assert settings.http_body_timeout_s == 30
    assert settings.http_max_connections_per_address == per_address
    assert (settings.http_max_connections, settings.http_fd_headroom) == (0, 512)
    # the API's pods read the config map
    api = objects[("Deployment", f"{RELEASE}-api")]["spec"]["template"]["spec"]["containers"][0]
    assert {"configMapRef": {"name": RELEASE}} in api["envFrom"]


def test_only_the_lifecycle_manager_may_act_in_the_cluster(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = by_kind(rendered["full"])
    lifecycle, api = f"{RELEASE}-lifecycle-manager", f"{RELEASE}-api"
    assert ("ServiceAccount", lifecycle) in objects
    assert objects[("ServiceAccount", api)]["automountServiceAccountToken"] is False
    for component in ("worker", "beat", "monitor", "pod-watcher"):
        pod = objects[("Deployment", f"{RELEASE}-{component}")]["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == lifecycle
    pod = objects[("Deployment", api)]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == api and pod["automountServiceAccountToken"] is False
    bound = [
        (subject["name"], is_hook(obj))
        for obj in objects.values()
        if obj["kind"] in ("RoleBinding", "ClusterRoleBinding")
        for subject in obj["subjects"]
    ]
    # Besides, while `helm uninstall` runs, its shutdown hook (see the shutdown tests below).
    assert bound and set(bound) == {(lifecycle, False), (f"{RELEASE}-shutdown", True)}


def test_the_bundled_stores_take_connections_only_from_dlaas_pods(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = by_kind(rendered["default"])
    control_plane = {"api", "worker", "beat", "monitor", "pod-watcher"}
    for component, learners_too in (("postgresql", False), ("redis", True), ("s3", True)):
        policy = objects[("NetworkPolicy", f"{RELEASE}-{component}")]["spec"]
        assert policy["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == component
        assert policy["policyTypes"] == ["Ingress"]
        [rule] = policy["ingress"]
        sources = rule["from"]
        [expression] = sources[0]["podSelector"]["matchExpressions"]
        assert set(expression["values"]) == control_plane
        assert (len(sources) == 2) is learners_too
        if learners_too:
            assert sources[1]["podSelector"]["matchLabels"]["dlaas.io/role"] == "learner"
    external = by_kind(rendered["external"])
    assert not [name for kind, name in external if kind == "NetworkPolicy"]


def refusal(helm: Any, values: dict[str, Any]) -> str:
    """The message with which the chart refuses to render `values`."""
    with pytest.raises(helm.errors.HelmRenderError) as refused:
        render(helm, values)
    return str(refused.value)


def test_with_no_values_the_chart_refuses_to_render_naming_the_fix(helm: Any) -> None:
    message = refusal(helm, {})
    assert "is empty: the chart ships no default secret" in message
    assert "openssl rand -hex 32" in message and "existingSecret" in message
    # (`helm lint` does not run `fail`, as Helm never does when linting: render to see it.)


@pytest.mark.parametrize("path", SECRET_VALUES)
@pytest.mark.parametrize(
    ("value", "why"),
    [
        (None, "is empty"),
        ("", "is empty"),
        ("change-me-admin-token", "is a well-known default"),
        ("Dlaas-Secret", "is a well-known default"),
        ("e2e-admin-token", "is a well-known default"),
        ("f" * 31, "is shorter than 32 characters"),
    ],
    ids=["missing", "empty", "old-default", "default-any-case", "old-e2e", "short"],
)
def test_a_missing_default_or_short_secret_fails_rendering_naming_it_and_the_fix(
    helm: Any, path: str, value: str | None, why: str
) -> None:
    message = refusal(helm, with_value(path, value))
    assert f"{path} {why}" in message
    assert f"--set {path}=$(openssl rand -hex 32)" in message
    assert "existingSecret" in message


@pytest.mark.parametrize("path", ["postgresql.password", "redis.password"])
def test_a_password_that_goes_into_a_url_must_keep_its_characters(helm: Any, path: str) -> None:
    message = refusal(helm, with_value(path, "p@ss/word:" + "x" * 32))
    assert f"{path} goes into a URL" in message


def test_a_secret_the_chart_does_not_use_is_not_required(helm: Any) -> None:
    external = merged(
        with_value("postgresql.password", None),
        with_value("redis.password", None),
        {
            "postgresql": {"enabled": False, "externalUrl": "postgresql+asyncpg://u:p@db/dlaas"},
            "redis": {"enabled": False, "externalUrl": "redis://:p@redis:6379/0"},
        },
    )
    del external["postgresql"]["password"], external["redis"]["password"]
    objects = by_kind(render(helm, external))
    assert "POSTGRES_PASSWORD" not in objects[("Secret", RELEASE)]["stringData"]
    assert "REDIS_PASSWORD" not in objects[("Secret", RELEASE)]["stringData"]


def test_the_charts_defaults_are_those_dlaas_secrets_refuses() -> None:
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    listed = re.search(r'define "dlaas.knownDefaults" -}}\n(.*?)\n', helpers)
    assert listed is not None
    assert set(listed.group(1).split()) == KNOWN_DEFAULTS
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for path in SECRET_VALUES:
        holder = values
        for key in path.split("."):
            holder = holder[key]
        assert holder == "", f"values.yaml ships a value for {path}"


def test_the_bundled_redis_requires_the_password_dlaas_connects_with(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = by_kind(rendered["default"])
    secret = objects[("Secret", RELEASE)]["stringData"]
    password = SECRETS["redis"]["password"]
    assert secret["REDIS_PASSWORD"] == password
    assert secret["DLAAS_REDIS_URL"] == (
        f"redis://:{password}@{RELEASE}-redis.{NAMESPACE}.svc:6379/0"
    )
    redis = objects[("Deployment", f"{RELEASE}-redis")]["spec"]["template"]["spec"]
    [container] = redis["containers"]
    env = {item["name"]: item["valueFrom"]["secretKeyRef"] for item in container["env"]}
    assert env["REDISCLI_AUTH"] == {"name": RELEASE, "key": "REDIS_PASSWORD"}
    script = container["command"][-1]
    assert container["command"][:2] == ["sh", "-c"]
    assert "requirepass $REDISCLI_AUTH" in script and password not in script
    assert container["readinessProbe"]["exec"]["command"] == ["redis-cli", "ping"]
    maxmemory, policy = maxmemory_of(script)
    limit = container["resources"]["limits"]["memory"]
    assert limit.endswith("Mi") or limit.endswith("Gi"), limit
    limit_bytes = int(limit[:-2]) * 1024 ** (2 if limit.endswith("Mi") else 3)
    # at its maxmemory Redis refuses writes, well before the kernel kills it at its limit
    assert policy == "noeviction" and 256 * 1000**2 <= maxmemory <= 0.8 * limit_bytes


def test_no_rendered_object_carries_a_default_secret(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    text = json.dumps(rendered).lower()
    for default in KNOWN_DEFAULTS - {"dlaas", "admin", "secret", "password"}:
        assert default not in text, default
    secret = by_kind(rendered["default"])[("Secret", RELEASE)]["stringData"]
    assert secret["DLAAS_ADMIN_TOKEN"] == SECRETS["adminToken"]
    assert f":{SECRETS['postgresql']['password']}@" in secret["DLAAS_DATABASE_URL"]


# The control plane scales itself: HorizontalPodAutoscalers and PodDisruptionBudgets.

SCALED = ("api", "worker")  # by an autoscaler unless it is off
BUDGETED = ("api", "worker", "monitor")  # components that may run several replicas
SINGLE = ("beat", "pod-watcher")  # one replica each, always


def queue_metric_name() -> str:
    [family] = system.CELERY_QUEUE_LENGTH.describe()
    return family.name


def test_the_api_scales_on_cpu_and_the_workers_on_the_queue_the_api_reports(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = by_kind(rendered["default"])
    for component in SCALED:
        hpa = objects[("HorizontalPodAutoscaler", f"{RELEASE}-{component}")]
        assert hpa["apiVersion"] == "autoscaling/v2"
        target = hpa["spec"]["scaleTargetRef"]
        deployment = objects[(target["kind"], target["name"])]
        assert deployment["apiVersion"] == target["apiVersion"] == "apps/v1"
        assert deployment["metadata"]["name"] == f"{RELEASE}-{component}"
        assert "replicas" not in deployment["spec"]  # the autoscaler's to set, not helm's
        assert 1 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    [api_metric] = objects[("HorizontalPodAutoscaler", f"{RELEASE}-api")]["spec"]["metrics"]
    assert api_metric == {
        "type": "Resource",
        "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}},
    }
    [queue] = objects[("HorizontalPodAutoscaler", f"{RELEASE}-worker")]["spec"]["metrics"]
    assert queue["type"] == "External"
    assert queue["external"]["metric"] == {
        "name": queue_metric_name(),
        "selector": {"matchLabels": {"queue": system.CELERY_QUEUE}},
    }
    assert queue["external"]["target"] == {"type": "AverageValue", "averageValue": "5"}
    for component in SINGLE:
        assert ("HorizontalPodAutoscaler", f"{RELEASE}-{component}") not in objects
        assert objects[("Deployment", f"{RELEASE}-{component}")]["spec"]["replicas"] == 1


def test_the_prometheus_adapter_rule_the_chart_documents_serves_the_metric_it_scales_on() -> None:
    """values.yaml's rule, as an operator copies it into prometheus-adapter's values, and the
    README's, the same."""
    text = (CHART / "values.yaml").read_text()
    block = re.search(r"^ *#   rules:\n((?: *#  .*\n)+)", text, re.MULTILINE)
    assert block is not None
    rules = yaml.safe_load(
        "rules:\n"
        + "".join(line.split("#", 1)[1][3:] + "\n" for line in block.group(1).splitlines())
    )
    [rule] = rules["rules"]["external"]
    metric = queue_metric_name()
    assert rule["seriesQuery"].startswith(metric + "{")
    assert rule["resources"] == {"overrides": {"namespace": {"resource": "namespace"}}}
    # Every API pod reports the whole queue: the rule takes one of them, never their sum.
    assert rule["metricsQuery"].startswith("max by (queue) (")
    values = yaml.safe_load(text)["worker"]["autoscaling"]["queueLength"]
    assert values["metric"] == metric and values["selector"] == {"queue": system.CELERY_QUEUE}
    readme = (CHART.parents[1] / "README.md").read_text()
    [documented] = re.findall(r"```yaml\n(rules:\n  external:\n.*?)```", readme, re.DOTALL)
    assert yaml.safe_load(documented) == rules


def test_scaled_workers_never_embed_the_beat(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """Each worker replica would schedule every reconcile again: the beat runs on its own."""
    objects = by_kind(rendered["default"])
    [worker] = objects[("Deployment", f"{RELEASE}-worker")]["spec"]["template"]["spec"][
        "containers"
    ]
    assert "--no-beat" in worker["command"]
    assert not {"-B", "--beat"} & set(worker["command"])
    [beat] = objects[("Deployment", f"{RELEASE}-beat")]["spec"]["template"]["spec"]["containers"]
    assert "beat" in beat["command"]


def test_every_budget_selects_exactly_its_components_pods_and_never_holds_a_drain(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    for rendering, max_unavailable in (("default", 1), ("full", "25%")):
        objects = by_kind(rendered[rendering])
        budgets = {name for kind, name in objects if kind == "PodDisruptionBudget"}
        assert budgets == {f"{RELEASE}-{component}" for component in BUDGETED}
        pods = [
            obj["spec"]["template"]["metadata"]["labels"]
            for obj in objects.values()
            if obj["kind"] in ("Deployment", "StatefulSet")
        ]
        for component in BUDGETED:
            budget = objects[("PodDisruptionBudget", f"{RELEASE}-{component}")]
            assert budget["apiVersion"] == "policy/v1"
            deployment = objects[("Deployment", f"{RELEASE}-{component}")]
            selector = budget["spec"]["selector"]["matchLabels"]
            assert selector == deployment["spec"]["selector"]["matchLabels"]
            chosen = [labels for labels in pods if selector.items() <= labels.items()]
            assert chosen == [deployment["spec"]["template"]["metadata"]["labels"]]
            # maxUnavailable, not minAvailable: one replica may still be evicted
            assert "minAvailable" not in budget["spec"]
            assert budget["spec"]["maxUnavailable"] == max_unavailable
            assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


def test_turned_off_the_autoscalers_and_budgets_are_absent_and_replicas_are_fixed(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = by_kind(rendered["fixed"])
    kinds = {kind for kind, _ in objects}
    assert "HorizontalPodAutoscaler" not in kinds and "PodDisruptionBudget" not in kinds
    assert objects[("Deployment", f"{RELEASE}-api")]["spec"]["replicas"] == 2
    assert objects[("Deployment", f"{RELEASE}-worker")]["spec"]["replicas"] == 3
    for component in (*SINGLE, "monitor"):
        assert objects[("Deployment", f"{RELEASE}-{component}")]["spec"]["replicas"] == 1
    external = by_kind(rendered["external"])  # autoscalers off, budgets left on
    assert not [name for kind, name in external if kind == "HorizontalPodAutoscaler"]
    assert external[("Deployment", f"{RELEASE}-worker")]["spec"]["replicas"] == 3
    assert ("PodDisruptionBudget", f"{RELEASE}-worker") in external


def test_the_full_values_scale_workers_on_the_queue_and_cpu_with_the_behavior_given(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = by_kind(rendered["full"])
    worker = objects[("HorizontalPodAutoscaler", f"{RELEASE}-worker")]["spec"]
    queue, cpu = worker["metrics"]
    assert queue["external"]["metric"]["selector"]["matchLabels"] == {
        "queue": "celery",
        "app_kubernetes_io_instance": RELEASE,
    }
    assert queue["external"]["target"]["averageValue"] == "3"
    assert cpu["resource"]["target"] == {"type": "Utilization", "averageUtilization": 80}
    assert worker["behavior"] == FULL_VALUES["worker"]["autoscaling"]["behavior"]
    api = objects[("HorizontalPodAutoscaler", f"{RELEASE}-api")]["spec"]
    assert api["maxReplicas"] == 6
    assert api["behavior"] == {"scaleDown": {"stabilizationWindowSeconds": 600}}


def test_the_api_pods_invite_prometheus_to_scrape_their_metrics(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    api = by_kind(rendered["default"])[("Deployment", f"{RELEASE}-api")]["spec"]["template"]
    annotations = api["metadata"]["annotations"]
    [container] = api["spec"]["containers"]
    [port] = container["ports"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(port["containerPort"])
    assert annotations["prometheus.io/path"] == "/metrics"
    fixed = by_kind(rendered["fixed"])[("Deployment", f"{RELEASE}-api")]["spec"]["template"]
    assert not [key for key in fixed["metadata"]["annotations"] if key.startswith("prometheus")]


@pytest.mark.parametrize(
    ("values", "why"),
    [
        (
            {"worker": {"autoscaling": {"minReplicas": 5, "maxReplicas": 2}}},
            "worker.autoscaling.maxReplicas (2) is below worker.autoscaling.minReplicas (5)",
        ),
        (
            {"api": {"autoscaling": {"minReplicas": 0}}},
            "api.autoscaling.minReplicas must be at least 1",
        ),
        (
            {"worker": {"autoscaling": {"queueLength": {"enabled": False}}}},
            "worker.autoscaling has no metric",
        ),
    ],
    ids=["max-below-min", "min-zero", "worker-without-metric"],
)
def test_autoscaling_that_cannot_work_fails_rendering_naming_the_value(
    helm: Any, values: dict[str, Any], why: str
) -> None:
    assert why in refusal(helm, merged(SECRETS, values))


def test_workers_may_scale_on_cpu_alone_where_no_metrics_adapter_runs(helm: Any) -> None:
    cpu_only = {
        "worker": {
            "autoscaling": {"queueLength": {"enabled": False}, "targetCPUUtilizationPercentage": 70}
        }
    }
    objects = by_kind(render(helm, merged(SECRETS, cpu_only)))
    hpa = objects[("HorizontalPodAutoscaler", f"{RELEASE}-worker")]
    [metric] = hpa["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu"
    for version in VERSIONS:
        kubernetes_validate.validate(hpa, version, strict=True)


def _external_s3(**s3: Any) -> dict[str, Any]:
    values = merged(SECRETS, {"s3": {"enabled": False, "endpoint": "https://s3.amazonaws.com"}})
    values["s3"].update(s3)
    return {**values, "s3": {k: v for k, v in values["s3"].items() if v is not None}}


def test_an_external_stores_access_key_id_is_taken_as_it_is(helm: Any) -> None:
    aws_key_id = "AKIAIOSFODNN7EXAMPLE"  # 20 characters: an identifier, not a secret
    objects = by_kind(render(helm, _external_s3(accessKey=aws_key_id)))
    assert objects[("Secret", RELEASE)]["stringData"]["DLAAS_S3_ACCESS_KEY"] == aws_key_id
    # its secret key is still a secret, and still checked
    message = refusal(helm, _external_s3(accessKey=aws_key_id, secretKey="short"))
    assert "s3.secretKey is shorter than 32 characters" in message
    message = refusal(helm, _external_s3(accessKey=None))
    assert "s3.accessKey is empty" in message and "s3.workloadIdentity" in message


def test_external_s3_through_workload_identity_needs_no_static_keys(helm: Any) -> None:
    role = {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/dlaas"}
    values = _external_s3(accessKey=None, secretKey=None, workloadIdentity=role)
    objects = by_kind(render(helm, values))
    secret = objects[("Secret", RELEASE)]["stringData"]
    assert "DLAAS_S3_ACCESS_KEY" not in secret and "DLAAS_S3_SECRET_KEY" not in secret
    for account in (f"{RELEASE}-api", f"{RELEASE}-lifecycle-manager"):
        annotations = objects[("ServiceAccount", account)]["metadata"]["annotations"]
        assert annotations == role, account
    message = refusal(helm, merged(SECRETS, {"s3": {"workloadIdentity": role}}))
    assert "s3.workloadIdentity is for an external S3 store" in message


SHUTDOWN = f"{RELEASE}-shutdown"


@pytest.mark.parametrize("rendering", ["default", "full", "external", "fixed"])
def test_uninstall_first_stops_the_workers_the_learners_and_the_monitor(
    rendered: dict[str, list[dict[str, Any]]], rendering: str
) -> None:
    objects = by_kind(rendered[rendering])
    hooks = {key: obj for key, obj in objects.items() if is_hook(obj)}
    assert set(hooks) == {
        ("ServiceAccount", SHUTDOWN),
        ("Role", SHUTDOWN),
        ("RoleBinding", SHUTDOWN),
        ("Role", f"{SHUTDOWN}-learners"),
        ("RoleBinding", f"{SHUTDOWN}-learners"),
        ("Job", SHUTDOWN),
    }
    weights = {}
    for key, obj in hooks.items():
        annotations = obj["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "pre-delete"  # before Helm deletes anything
        assert set(annotations["helm.sh/hook-delete-policy"].split(",")) == {
            "before-hook-creation",
            "hook-succeeded",
        }
        weights[key] = int(annotations["helm.sh/hook-weight"])
    # Its account and rights are made before the Job and exist only while the hook runs.
    assert all(weights[key] < weights[("Job", SHUTDOWN)] for key in weights if key[0] != "Job")

    job = hooks[("Job", SHUTDOWN)]["spec"]
    pod = job["template"]["spec"]
    assert pod["serviceAccountName"] == SHUTDOWN and pod["restartPolicy"] == "Never"
    [container] = pod["containers"]
    assert container["image"] == "dlaas-lifecycle-manager:0.1.0"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert "envFrom" not in container  # no credentials: it talks to the Kubernetes API only
    command = container["command"]
    assert command[:3] == ["python", "-m", "lifecycle_manager.backends.kubernetes.shutdown"]
    plan = shutdown.parse_args(command[3:])  # the hook's own parser takes what it is given
    # It scales the release's own worker and monitor Deployments and waits for their pods,
    # and stops the learners where the lifecycle manager creates them.
    for name, selector in [
        (plan.worker, plan.worker_selector),
        (plan.monitor, plan.monitor_selector),
    ]:
        deployment = objects[("Deployment", name)]
        assert selector == deployment["spec"]["selector"]["matchLabels"]
        assert selects(selector, deployment["spec"]["template"]["metadata"]["labels"])
    assert plan.worker == f"{RELEASE}-worker" and plan.monitor == f"{RELEASE}-monitor"
    assert plan.namespace == NAMESPACE
    config = objects[("ConfigMap", RELEASE)]["data"]
    assert plan.learners_namespace == config["DLAAS_KUBE_NAMESPACE"]
    # Bounded: the learners' grace fits in it, and it in `helm uninstall`'s default 5 minutes.
    assert int(config["DLAAS_KUBE_STOP_GRACE_S"]) < plan.timeout_s
    assert plan.timeout_s < job["activeDeadlineSeconds"] <= 300


def test_the_shutdown_hook_may_do_what_it_does_and_no_more(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = by_kind(rendered["full"])

    def granted(role: dict[str, Any]) -> dict[str, set[str]]:
        return {
            resource: set(rule["verbs"]) for rule in role["rules"] for resource in rule["resources"]
        }

    release = objects[("Role", SHUTDOWN)]
    assert release["metadata"].get("namespace", NAMESPACE) == NAMESPACE
    assert granted(release) == rbac.SHUTDOWN
    # It may scale the worker and the monitor Deployments only, and change nothing else.
    [scale] = [rule for rule in release["rules"] if rule["resources"] == ["deployments/scale"]]
    assert scale["apiGroups"] == ["apps"]
    assert set(scale["resourceNames"]) == {f"{RELEASE}-worker", f"{RELEASE}-monitor"}
    learners = objects[("Role", f"{SHUTDOWN}-learners")]
    assert learners["metadata"]["namespace"] == "dlaas-learners"
    assert granted(learners) == rbac.SHUTDOWN_LEARNERS
    for name, namespace in [(SHUTDOWN, NAMESPACE), (f"{SHUTDOWN}-learners", "dlaas-learners")]:
        binding = objects[("RoleBinding", name)]
        assert binding["metadata"].get("namespace", NAMESPACE) == namespace
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": name,
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": SHUTDOWN, "namespace": NAMESPACE}
        ]
    assert not [key for key in objects if key[0] == "ClusterRoleBinding" and SHUTDOWN in key[1]]


def test_a_shutdown_timeout_shorter_than_stopping_takes_fails_rendering_naming_it(
    helm: Any,
) -> None:
    values = {"learners": {"stopGraceSeconds": 200}, "shutdown": {"timeoutSeconds": 240}}
    why = refusal(helm, merged(SECRETS, values))
    assert "shutdown.timeoutSeconds (240) must exceed the 290 s" in why
    assert "learners.stopGraceSeconds (200)" in why
    values["shutdown"]["timeoutSeconds"] = 300
    assert render(helm, merged(SECRETS, values))


def test_the_shutdown_hook_may_be_turned_off(helm: Any) -> None:
    objects = render(helm, merged(SECRETS, {"shutdown": {"enabled": False}}))
    assert not [obj for obj in objects if is_hook(obj)]
