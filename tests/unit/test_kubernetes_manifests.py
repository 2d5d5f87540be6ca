"""The objects the kubernetes backend creates: valid for Kubernetes 1.30 and 1.37 (strict),
and saying what the job asked for."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from learner_image.runner_config import child_env, parse_config
from lifecycle_manager.backends.base import LearnerSpec, Resources
from lifecycle_manager.backends.kubernetes.manifests import (
    SECRET_ENV,
    PodOptions,
    check_name,
    network_policy_manifest,
    pod_manifest,
    secret_manifest,
    service_manifest,
)
from lifecycle_manager.glue.learner_specs import learner_specs
from storage.settings import Settings

VERSIONS = ("1.30.0", "1.37.0")
PYTHON_I = ["/usr/local/bin/python", "-I", "-m"]  # the image's interpreter, isolated
OWNER = {"apiVersion": "v1", "kind": "Secret", "name": "dlaas-training-abc", "uid": "0c3e"}
FULL_OPTIONS = PodOptions(
    namespace="team-a",
    image="registry.example/dlaas-learner:0.1.0",
    gpu_image="registry.example/dlaas-learner:0.1.0-cuda",
    pull_policy="Always",
    node_selector={"dlaas.io/pool": "gpu"},
    tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    stop_grace_s=45,
    platform_namespace="dlaas",
    egress_cidrs=["203.0.113.0/24"],
    ephemeral_storage="20Gi",
)
ENV = {
    "TRAINING_ID": "training-abc",
    "DLAAS_S3_ACCESS_KEY": "key-id",
    "DLAAS_S3_SECRET_KEY": "s3cret",
    "DLAAS_REDIS_URL": "redis://:pw@redis:6379/0",
}


def spec(learner: int = 1, num: int = 2, gpus: int = 1, **env: str) -> LearnerSpec:
    return LearnerSpec(
        job_id="training-abc",
        learner=learner,
        attempt=3,
        num_learners=num,
        command=["dlaas-learner", "--job", "training-abc", "--", "python train.py"],
        env={**ENV, **env},
        resources=Resources(cpus=1.5, memory_bytes=3 * 2**30, gpus=gpus),
    )


def objects() -> dict[str, dict[str, Any]]:
    """Every distinct object the backend makes: each shape once."""
    return {
        "pod with GPU, sidecar, selector, tolerations": pod_manifest(
            spec(DLAAS_PS_MODE="bounded", DLAAS_PS_STALENESS="4"), FULL_OPTIONS, OWNER
        ),
        "pod of a 1-learner CPU job, defaults": pod_manifest(
            LearnerSpec("training-abc", 1, 1, 1, ["dlaas-learner"]), PodOptions()
        ),
        "headless service": service_manifest("training-abc", "team-a", OWNER),
        "secret": secret_manifest("training-abc", "team-a", {"DLAAS_S3_SECRET_KEY": "s3cret"}),
        "network policy with an egress block": network_policy_manifest(
            "training-abc", FULL_OPTIONS, OWNER
        ),
        "network policy, defaults": network_policy_manifest("training-abc", PodOptions()),
    }


@pytest.mark.parametrize("version", VERSIONS)
def test_every_object_validates_strictly(version: str) -> None:
    for name, obj in objects().items():
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            raise AssertionError(f"{name} is invalid for {version}: {error}") from error


def test_enums_and_names_schema_validation_does_not_check() -> None:
    for obj in objects().values():
        check_name(obj["metadata"]["name"])
        spec_ = obj.get("spec") or {}
        assert spec_.get("restartPolicy", "Never") in ("Always", "OnFailure", "Never")
        for container in [*spec_.get("containers", []), *spec_.get("initContainers", [])]:
            assert container["imagePullPolicy"] in ("Always", "IfNotPresent", "Never")
            check_name(container["name"], label=True)
        for volume in spec_.get("volumes", []):
            check_name(volume["name"], label=True)
    with pytest.raises(ValueError, match="DNS-1123"):
        check_name("Dlaas_Job")


def containers(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    spec = pod["spec"]
    return {c["name"]: c for c in [*spec.get("initContainers", []), *spec["containers"]]}


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in container["env"]}


def test_credentials_never_appear_in_the_pod() -> None:
    pod = pod_manifest(spec(), FULL_OPTIONS, OWNER)
    text = repr(pod)
    for secret in ("key-id", "s3cret", "redis://:pw@"):
        assert secret not in text
    env = env_of(containers(pod)["shipper"])
    assert env["DLAAS_REDIS_URL"] == {
        "name": "DLAAS_REDIS_URL",
        "valueFrom": {"secretKeyRef": {"name": "dlaas-training-abc", "key": "DLAAS_REDIS_URL"}},
    }
    assert env["TRAINING_ID"]["value"] == "training-abc"


def test_the_program_runs_without_any_credential_and_only_its_helpers_hold_them() -> None:
    pod = pod_manifest(
        spec(DLAAS_PS_MODE="async", DLAAS_JOB_TOKEN="dlaasjob_x", DLAAS_JOB_OBJECTS_URL="http://a"),
        FULL_OPTIONS,
        OWNER,
    )
    by_name = containers(pod)
    assert list(by_name) == ["fetch", "ps", "program", "shipper"]
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert pod["spec"]["shareProcessNamespace"] is False
    program = by_name["program"]
    assert program["command"] == [
        "/usr/local/bin/python", "-I", "-m", "learner_image.runner",
        "program", "--job", "training-abc", "--", "python train.py",
    ]  # fmt: skip
    env = env_of(program)
    assert not [item for item in program["env"] if "valueFrom" in item]
    for key in (*SECRET_ENV, "DLAAS_JOB_OBJECTS_URL", "DLAAS_EXIT_REPORT", "DLAAS_RUNNER_DIR"):
        assert key not in env
    assert "envFrom" not in program
    secret_volumes = [v for v in pod["spec"]["volumes"] if "secret" in v or "projected" in v]
    assert not secret_volumes
    assert env["DLAAS_SHARED_DIR"]["value"] == "/job"
    assert env["LOG_DIR"]["value"] == "/job/logs"
    for helper in ("fetch", "shipper", "ps"):
        helper_env = env_of(by_name[helper])
        assert helper_env["DLAAS_JOB_TOKEN"]["valueFrom"] == {
            "secretKeyRef": {"name": "dlaas-training-abc", "key": "DLAAS_JOB_TOKEN"}
        }
        assert "DLAAS_REDIS_URL" in helper_env
        assert helper_env["DLAAS_JOB_OBJECTS_URL"]["value"] == "http://a"
    for helper in ("fetch", "shipper"):
        assert by_name[helper]["command"][:5] == [
            *PYTHON_I,
            "learner_image.runner",
            helper.replace("shipper", "ship"),
        ]
        assert by_name[helper]["terminationMessagePath"] == "/dev/termination-log"
        assert env_of(by_name[helper])["DLAAS_EXIT_REPORT"]["value"] == "/dev/termination-log"
        assert env_of(by_name[helper])["DLAAS_RUNNER_DIR"]["value"] == "/tmp/dlaas"
    # The fetch runs to its end first; the shipper runs beside the program and ends by itself.
    assert "restartPolicy" not in by_name["fetch"]
    assert "restartPolicy" not in by_name["shipper"]


def test_the_program_shares_the_job_dir_with_its_helpers_and_nothing_of_theirs() -> None:
    by_name = containers(pod_manifest(spec(DLAAS_PS_MODE="async"), FULL_OPTIONS, OWNER))
    mounts = {
        name: {m["mountPath"]: m["name"] for m in c["volumeMounts"]} for name, c in by_name.items()
    }
    assert mounts["program"] == {"/dev/shm": "shm", "/job": "work", "/tmp": "tmp"}
    assert mounts["fetch"] == mounts["shipper"] == {"/job": "work", "/tmp": "helper"}
    assert mounts["ps"] == {"/dev/shm": "shm", "/tmp": "helper"}


def test_the_job_asks_resources_for_its_program_and_the_helpers_take_little() -> None:
    by_name = containers(pod_manifest(spec(), FULL_OPTIONS, OWNER))
    program = by_name["program"]["resources"]
    assert program["requests"] == {"cpu": "1500m", "memory": str(3 * 2**30), "nvidia.com/gpu": "1"}
    assert program["limits"] == {**program["requests"], "ephemeral-storage": "20Gi"}
    for helper in ("fetch", "shipper"):
        resources = by_name[helper]["resources"]
        assert "nvidia.com/gpu" not in resources["limits"]
        assert set(resources["limits"]) == {"cpu", "memory", "ephemeral-storage"}


def test_placement_and_images_come_from_the_options() -> None:
    gpu_pod = pod_manifest(spec(gpus=1), FULL_OPTIONS, OWNER)
    cpu_pod = pod_manifest(spec(gpus=0), FULL_OPTIONS, OWNER)
    assert gpu_pod["spec"]["containers"][0]["image"].endswith("-cuda")
    assert cpu_pod["spec"]["containers"][0]["image"] == "registry.example/dlaas-learner:0.1.0"
    assert gpu_pod["spec"]["nodeSelector"] == {"dlaas.io/pool": "gpu"}
    assert gpu_pod["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert gpu_pod["spec"]["terminationGracePeriodSeconds"] == 45
    assert "nvidia.com/gpu" not in cpu_pod["spec"]["containers"][0]["resources"]["requests"]


def test_a_learner_placed_on_a_node_selects_it_by_hostname_besides_the_options() -> None:
    placed = dataclasses.replace(spec(), node="gpu-7")
    assert pod_manifest(placed, FULL_OPTIONS)["spec"]["nodeSelector"] == {
        "dlaas.io/pool": "gpu",
        "kubernetes.io/hostname": "gpu-7",
    }
    alone = pod_manifest(placed, PodOptions(namespace="team-a", image="dlaas-learner:0.1.0"))
    assert alone["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "gpu-7"}
    unplaced = pod_manifest(spec(), PodOptions(namespace="team-a", image="dlaas-learner:0.1.0"))
    assert "nodeSelector" not in unplaced["spec"]


def test_the_sidecar_only_with_a_parameter_server() -> None:
    assert "ps" not in containers(pod_manifest(spec(), FULL_OPTIONS, OWNER))
    with_ps = pod_manifest(spec(DLAAS_PS_MODE="async"), FULL_OPTIONS, OWNER)
    sidecar = containers(with_ps)["ps"]
    assert sidecar["command"][:5] == [*PYTHON_I, "learner_image.ps.server", "--job"]
    assert sidecar["restartPolicy"] == "Always"


def test_a_single_learner_needs_no_service_name() -> None:
    pod = pod_manifest(spec(num=1), FULL_OPTIONS, OWNER)
    assert "subdomain" not in pod["spec"]
    env = {item["name"]: item.get("value") for item in containers(pod)["program"]["env"]}
    assert env["MASTER_ADDR"] == "127.0.0.1"


def test_the_sidecar_command_is_one_dlaas_ps_accepts() -> None:
    from learner_image.ps.server_config import parse_config

    pod = pod_manifest(spec(DLAAS_PS_MODE="bounded", DLAAS_PS_STALENESS="4"), FULL_OPTIONS, OWNER)
    sidecar = containers(pod)["ps"]
    env = {item["name"]: item.get("value", "") for item in sidecar["env"]}
    config = parse_config(sidecar["command"][4:], env)
    assert (config.rank, config.world, config.staleness) == (0, 2, 4)
    assert config.peers[1] == "learner-2.dlaas-training-abc.team-a.svc:7070"
    assert str(config.directory) == "/dev/shm/dlaas-ps"


def test_a_jobs_pods_take_connections_only_from_their_peers() -> None:
    policy = network_policy_manifest("training-abc", FULL_OPTIONS, OWNER)
    peers = {"dlaas.io/job": "training-abc", "dlaas.io/role": "learner"}
    assert policy["metadata"]["ownerReferences"] == [OWNER]
    assert policy["spec"]["podSelector"] == {"matchLabels": peers}
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": {"matchLabels": peers}}]}]
    # the same selector the pods carry: the policy applies to every learner of the job
    pod_labels = pod_manifest(spec(), FULL_OPTIONS)["metadata"]["labels"]
    assert peers.items() <= pod_labels.items()


def test_a_jobs_pods_reach_only_peers_dns_and_the_platforms_redis_s3_and_api() -> None:
    egress = network_policy_manifest("training-abc", FULL_OPTIONS, OWNER)["spec"]["egress"]
    peers, dns, platform, cidrs = (rule["to"][0] for rule in egress)
    assert peers["podSelector"]["matchLabels"]["dlaas.io/job"] == "training-abc"
    assert dns["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    assert egress[1]["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    assert platform["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "dlaas"}
    [components] = platform["podSelector"]["matchExpressions"]
    assert components["values"] == ["redis", "s3", "api"]  # never the database
    assert cidrs == {"ipBlock": {"cidr": "203.0.113.0/24"}}
    default = network_policy_manifest("training-abc", PodOptions())["spec"]["egress"]
    assert len(default) == 3  # no address block unless one is configured
    assert default[2]["to"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "default"
    }


def test_learner_containers_are_read_only_and_bounded() -> None:
    pod = pod_manifest(spec(DLAAS_PS_MODE="async"), FULL_OPTIONS, OWNER)["spec"]
    for container in [*pod["containers"], *pod["initContainers"]]:
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert "/tmp" in [mount["mountPath"] for mount in container["volumeMounts"]]
        if container["name"] != "ps":  # the parameter server sums at full speed
            assert container["resources"]["limits"]["cpu"]
            assert container["resources"]["limits"]["ephemeral-storage"]
    [learner] = [c for c in pod["containers"] if c["name"] == "program"]
    assert learner["resources"]["limits"]["cpu"] == "1500m"
    assert learner["resources"]["limits"]["ephemeral-storage"] == "20Gi"
    env = {item["name"]: item.get("value") for item in learner["env"]}
    assert env["HOME"] == "/tmp"
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert volumes["work"]["emptyDir"] == {"sizeLimit": "20Gi"}
    assert volumes["tmp"]["emptyDir"]["sizeLimit"]


def test_the_users_environment_reaches_the_program_and_no_helper(tmp_path: Path) -> None:
    """A job's PYTHONPATH (at a sitecustomize.py in its archive), PATH and LD_PRELOAD would
    run its code in a helper holding its credentials: only the program's launcher gets them,
    as data it applies to the user's command."""
    user = {"PYTHONPATH": "/job/model/plant", "PATH": "/job/model/bin", "LD_PRELOAD": "/job/x.so"}
    manifest = {"framework": {"command": "python train.py"}, "environment": user}
    manifest["parameter_server"] = {"mode": "async"}
    [spec_] = learner_specs(
        job_id="training-abc", owner_id=1, attempt=1, num_learners=1, manifest=manifest,
        settings=Settings(home=tmp_path), job_token="dlaasjob_t0ken",
    )  # fmt: skip
    by_name = containers(pod_manifest(spec_, FULL_OPTIONS, OWNER))
    for name in ("fetch", "ps", "shipper"):
        helper = by_name[name]
        env = env_of(helper)
        assert not set(user) & set(env), name
        assert "DLAAS_PROGRAM_ENV" not in env, name
        assert not [v for v in user.values() if v in repr(helper)], name
        assert helper["command"][:3] == PYTHON_I, name
        assert Path(helper["command"][0]).is_absolute()
    program = by_name["program"]
    assert program["command"][:3] == PYTHON_I
    declared = {item["name"]: item["value"] for item in program["env"]}
    assert not set(user) & set(declared)  # not the launcher's own environment either
    config = parse_config(program["command"][5:], declared, cwd=tmp_path)
    program_env = child_env(config, declared)
    assert {key: program_env[key] for key in user} == user
    assert program_env["TRAINING_ID"] == "training-abc"
    assert "DLAAS_PROGRAM_ENV" not in program_env
