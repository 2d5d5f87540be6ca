"""The Kubernetes objects of a job, as plain dicts: its Secret, its Service and a pod per learner.

Pure. The job's Secret `dlaas-<job>` is its root object: it holds the credentials the
learners read (never written into a pod spec: the token minted for the job, with which they
reach its objects through the API's gateway, and the Redis URL), and owns the Service and
the pods, so deleting it lets the garbage collector delete the rest. Each deploy patches in
the newest token; pods of earlier attempts keep theirs, valid until the job stops.

```
 Secret dlaas-<job>  (root: credentials)
   |-- Service dlaas-<job>   headless; DNS learner-<n>.dlaas-<job>.<ns>.svc (jobs of 2+)
   |-- NetworkPolicy dlaas-<job>   the job's pods reach each other, DNS and the platform's
   |                               redis, s3 and api pods; nothing reaches them but peers
   |-- Pod dlaas-<job>-learner-<n>-a<attempt>     one per learner
         initContainers: fetch  (dlaas-learner fetch: DOWNLOADING; credentials)
                         ps     (native sidecar: restartPolicy Always; with parameter_server;
                                 peers at learner-<n>.dlaas-<job>.<ns>.svc:7070; credentials
                                 for its snapshots)
         containers:     program (dlaas-learner program -- COMMAND: the user's command; NO
                                  credentials: no Secret, no token; the job's CPU, memory,
                                  GPUs and ephemeral storage)
                         shipper (dlaas-learner ship: logs, metrics, heartbeats, checkpoints,
                                  STORING, the exit event; credentials; exits by itself, with
                                  the learner's exit code and exit report)
         volumes: work (emptyDir) at /job: fetch, program, shipper (code, data, checkpoints,
                  results, the log, the program's exit status and heartbeat file);
                  shm (emptyDir, Memory) at /dev/shm: program, ps;
                  tmp at /tmp: program; helper at /tmp: fetch, shipper, ps (their own files)
         read-only root filesystems; no service-account token; no shared process namespace
```

Every container runs dlaas's Python by the image's absolute interpreter in isolated mode
(`python -I`). The helpers (fetch, shipper, ps) get only the platform's variables; the
manifest's `environment` reaches the program container alone, as data for the launcher
(`DLAAS_PROGRAM_ENV`), which applies it to the user's command and not to itself: neither
a `PYTHONPATH` at a `sitecustomize.py` in the job's archive, nor a `PATH` or an `LD_PRELOAD`
runs a job's code in a process that holds its credentials.

The shipper is a regular container, not a native sidecar: the pod ends (and the lifecycle
manager reads its end) only once the shipper has stored what the program left and
published the exit event, and STORING is bounded by nothing but its own work (a native
sidecar is sent SIGTERM as soon as the program's container ends). Its exit code and its
termination message (the exit report) are the learner's, as the single-process runner's
are; the cluster's word on memory (OOMKilled) comes from the program's container.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from learner_image.ps import sidecar
from learner_image.runner_config import (
    RUNNER_DIR_ENV,
    SHARED_DIR_ENV,
    program_env_variable,
    runner_command,
)
from lifecycle_manager.backends.base import LearnerSpec
from storage import exit_reports
from storage.settings import Settings

GROUP = "dlaas.io"
JOB_LABEL = f"{GROUP}/job"
LEARNER_LABEL = f"{GROUP}/learner"
ATTEMPT_LABEL = f"{GROUP}/attempt"
ROLE_LABEL = f"{GROUP}/role"
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_SELECTOR = f"{MANAGED_BY}=dlaas"

FETCH_CONTAINER = "fetch"
PROGRAM_CONTAINER = "program"
SHIPPER_CONTAINER = "shipper"
PS_CONTAINER = "ps"
MASTER_PORT = 29500
GPU_RESOURCE = "nvidia.com/gpu"
# The label every node carries with its own name: a learner placed on a node selects it.
HOSTNAME_LABEL = "kubernetes.io/hostname"
WORK_DIR = "/job"
SHM_DIR = "/dev/shm"
TMP_DIR = "/tmp"
TMP_LIMIT = "1Gi"
HELPER_DIR = f"{TMP_DIR}/dlaas"  # the helpers' own files, on their own /tmp
# The helpers ship and fetch; the job's CPU, memory and GPUs are the program's.
HELPER_RESOURCES = {
    "requests": {"cpu": "100m", "memory": "256Mi"},
    "limits": {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "1Gi"},
}
RUN_AS_USER = 10001  # the `dlaas` user of the learner image
LEARNER_PYTHON: str = Settings.model_fields["kube_learner_python"].default
DIRS = {
    "MODEL_DIR": f"{WORK_DIR}/model",
    "DATA_DIR": f"{WORK_DIR}/data",
    "RESULT_DIR": f"{WORK_DIR}/results",
    "LOG_DIR": f"{WORK_DIR}/logs",
    "CHECKPOINT_DIR": f"{WORK_DIR}/checkpoints",
}
# Settings a learner needs that are secrets: they reach the pod through the job's Secret,
# and only its helper containers.
SECRET_ENV = (
    "DLAAS_JOB_TOKEN",
    "DLAAS_S3_ACCESS_KEY",
    "DLAAS_S3_SECRET_KEY",
    "DLAAS_REDIS_URL",
    "DLAAS_DATABASE_URL",
)
# Plain settings only the helpers use: where the job's objects are reached.
HELPER_ENV = ("DLAAS_JOB_OBJECTS_URL",)

# The parameter-server sidecar (`dlaas-ps` of the learner image, `learner_image.ps.sidecar`,
# flags of `learner_image.ps.server_config`): one per learner pod, its region in the pod's
# /dev/shm, the sidecars of a job finding each other by their names under the job's Service.
PS_REGION = f"{SHM_DIR}/dlaas-ps"
PS_PORT = 7070
PS_MODE_ENV = "DLAAS_PS_MODE"
PS_STALENESS_ENV = "DLAAS_PS_STALENESS"
PS_REQUESTS = {"cpu": "100m", "memory": "128Mi"}

_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(frozen=True)
class PodOptions:
    """Where and how learner pods run: the cluster side of the configuration."""

    namespace: str = "default"
    image: str = "dlaas-learner:0.1.0"
    gpu_image: str | None = None
    pull_policy: str = "IfNotPresent"
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, Any]] = ()
    stop_grace_s: int = 30
    platform_namespace: str | None = None  # None: the learners' namespace
    egress_cidrs: Sequence[str] = ()
    ephemeral_storage: str = "50Gi"
    python: str = LEARNER_PYTHON  # absolute: the image's interpreter, never one on a PATH

    @classmethod
    def from_settings(cls, settings: Settings) -> PodOptions:
        return cls(
            namespace=settings.kube_namespace,
            image=settings.kube_learner_image,
            gpu_image=settings.kube_learner_gpu_image,
            pull_policy=settings.kube_image_pull_policy,
            node_selector=dict(settings.kube_node_selector),
            tolerations=list(settings.kube_tolerations),
            stop_grace_s=settings.kube_stop_grace_s,
            platform_namespace=settings.kube_platform_namespace,
            egress_cidrs=list(settings.kube_learner_egress_cidrs),
            ephemeral_storage=settings.kube_learner_ephemeral_storage,
            python=settings.kube_learner_python,
        )


def root_name(job_id: str) -> str:
    """The name of the job's Secret (its root object) and of its Service."""
    return f"dlaas-{job_id}"


def hostname(learner: int) -> str:
    return f"learner-{learner}"


def master_addr(job_id: str, namespace: str) -> str:
    """Learner 1's DNS name through the job's headless Service."""
    return f"{hostname(1)}.{root_name(job_id)}.{namespace}.svc"


def check_name(name: str, *, label: bool = False) -> str:
    """Kubernetes names are checked here: schema validation does not catch bad ones."""
    pattern, limit = (_DNS_LABEL, 63) if label else (_DNS_SUBDOMAIN, 253)
    if len(name) > limit or not pattern.match(name):
        kind = "DNS-1035 label" if label else "DNS-1123 subdomain"
        raise ValueError(f"{name!r} is not a valid {kind} of at most {limit} characters")
    return name


def job_labels(job_id: str, role: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "dlaas",
        "app.kubernetes.io/component": role,
        MANAGED_BY: "dlaas",
        JOB_LABEL: job_id,
        ROLE_LABEL: role,
    }


def job_selector(job_id: str) -> str:
    return f"{MANAGED_SELECTOR},{JOB_LABEL}={job_id}"


def owner_reference(secret: Mapping[str, Any]) -> dict[str, Any]:
    """A reference to the job's root object as the API server returned it (with its uid)."""
    meta = secret["metadata"]
    return {"apiVersion": "v1", "kind": "Secret", "name": meta["name"], "uid": meta["uid"]}


def split_env(env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(plain, secret): the learner's environment, secrets set apart."""
    plain = {k: v for k, v in env.items() if k not in SECRET_ENV}
    secret = {k: v for k, v in env.items() if k in SECRET_ENV}
    return plain, secret


def secret_manifest(job_id: str, namespace: str, data: Mapping[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": check_name(root_name(job_id), label=True),
            "namespace": namespace,
            "labels": job_labels(job_id, "credentials"),
        },
        "type": "Opaque",
        "stringData": dict(data),
    }


def service_manifest(
    job_id: str, namespace: str, owner: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The headless Service that gives each learner of a job a DNS name."""
    meta: dict[str, Any] = {
        "name": check_name(root_name(job_id), label=True),
        "namespace": namespace,
        "labels": job_labels(job_id, "discovery"),
    }
    if owner is not None:
        meta["ownerReferences"] = [dict(owner)]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "clusterIP": "None",
            "selector": {JOB_LABEL: job_id, ROLE_LABEL: "learner"},
            # Peers resolve each other while they start, before anything is "ready".
            "publishNotReadyAddresses": True,
            "ports": [
                {"name": "dist", "port": MASTER_PORT, "targetPort": MASTER_PORT, "protocol": "TCP"},
                {"name": "ps", "port": PS_PORT, "targetPort": PS_PORT, "protocol": "TCP"},
            ],
        },
    }


# The platform's pods a learner pod may reach (the chart's component labels): Redis for its
# streams, the object store, and the API. Never the database.
PLATFORM_COMPONENTS = ("redis", "s3", "api")
DNS_PORTS = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]


def network_policy_manifest(
    job_id: str, options: PodOptions, owner: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The job's pods take connections only from each other (torch.distributed and the
    parameter server pick their ports) and make them only to each other, DNS and the
    platform's redis, s3 and api pods (and `egress_cidrs`): a job's code reaches nothing of
    the control plane beyond what its helpers need, and no other job."""
    meta: dict[str, Any] = {
        "name": check_name(root_name(job_id), label=True),
        "namespace": options.namespace,
        "labels": job_labels(job_id, "network"),
    }
    if owner is not None:
        meta["ownerReferences"] = [dict(owner)]
    peers = {"podSelector": {"matchLabels": {JOB_LABEL: job_id, ROLE_LABEL: "learner"}}}
    platform_namespace = options.platform_namespace or options.namespace
    platform = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": platform_namespace}},
        "podSelector": {
            "matchLabels": {"app.kubernetes.io/name": "dlaas"},
            "matchExpressions": [
                {
                    "key": "app.kubernetes.io/component",
                    "operator": "In",
                    "values": list(PLATFORM_COMPONENTS),
                }
            ],
        },
    }
    dns = {
        "namespaceSelector": {},
        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
    }
    egress: list[dict[str, Any]] = [
        {"to": [peers]},
        {"to": [dns], "ports": DNS_PORTS},
        {"to": [platform]},
    ]
    if options.egress_cidrs:
        egress.append({"to": [{"ipBlock": {"cidr": cidr}} for cidr in options.egress_cidrs]})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta,
        "spec": {
            "podSelector": {"matchLabels": {JOB_LABEL: job_id, ROLE_LABEL: "learner"}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [peers]}],
            "egress": egress,
        },
    }


def _cpu(cpus: float) -> str:
    return f"{max(1, round(cpus * 1000))}m"


def learner_resources(spec: LearnerSpec, ephemeral_storage: str) -> dict[str, dict[str, str]]:
    """Requests and limits: a learner holds what it asked for and no more (its CPU too, so
    one job cannot starve the others on a node)."""
    limits = spec.resources
    requests: dict[str, str] = {}
    bounds: dict[str, str] = {"ephemeral-storage": ephemeral_storage}
    if limits.cpus:
        requests["cpu"] = bounds["cpu"] = _cpu(limits.cpus)
    if limits.memory_bytes:
        requests["memory"] = bounds["memory"] = str(limits.memory_bytes)
    if limits.gpus:
        requests[GPU_RESOURCE] = bounds[GPU_RESOURCE] = str(limits.gpus)
    out: dict[str, dict[str, str]] = {}
    if requests:
        out["requests"] = requests
    if bounds:
        out["limits"] = bounds
    return out


def _security_context() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def _program_env(spec: LearnerSpec, options: PodOptions) -> dict[str, str]:
    """The platform's part of the program container's environment: the job's settings, none
    of its credentials (and not the user's environment, which only `program_env` adds)."""
    plain, _secret = split_env(spec.env)
    for key in HELPER_ENV:
        plain.pop(key, None)
    plain.update(DIRS)
    if spec.num_learners > 1:
        plain["MASTER_ADDR"] = master_addr(spec.job_id, options.namespace)
    else:
        plain["MASTER_ADDR"] = "127.0.0.1"
    plain["MASTER_PORT"] = str(MASTER_PORT)
    if spec.env.get(PS_MODE_ENV):
        plain["DLAAS_PS_DIR"] = PS_REGION
    plain.setdefault("DLAAS_STOP_GRACE_S", str(max(1, options.stop_grace_s // 2)))
    plain[SHARED_DIR_ENV] = WORK_DIR
    # the root filesystem is read-only: caches and home-directory writes go to /tmp
    plain.setdefault("HOME", TMP_DIR)
    if spec.resources.cpus:
        plain.setdefault("OMP_NUM_THREADS", str(max(1, math.ceil(spec.resources.cpus))))
    return plain


def _env_list(plain: Mapping[str, str]) -> list[dict[str, Any]]:
    return [{"name": k, "value": v} for k, v in sorted(plain.items())]


def program_env(spec: LearnerSpec, options: PodOptions) -> list[dict[str, Any]]:
    """The program container's environment: the platform's, and the user's environment
    carried for the launcher to apply to the user's command."""
    return _env_list({**_program_env(spec, options), **program_env_variable(spec.program_env)})


def helper_env(spec: LearnerSpec, options: PodOptions) -> list[dict[str, Any]]:
    """The helpers' environment, the platform's alone: the program container's platform part,
    where they reach the job's objects, their own directory and exit report, and the job's
    credentials from its Secret; nothing of the user's environment."""
    plain = _program_env(spec, options)
    plain.update({k: v for k, v in spec.env.items() if k in HELPER_ENV})
    plain[RUNNER_DIR_ENV] = HELPER_DIR
    plain[exit_reports.EXIT_REPORT_ENV] = exit_reports.KUBERNETES_PATH
    _plain, secret = split_env(spec.env)
    root = root_name(spec.job_id)
    return _env_list(plain) + [
        {"name": key, "valueFrom": {"secretKeyRef": {"name": root, "key": key}}}
        for key in sorted(secret)
    ]


def ps_command(spec: LearnerSpec, options: PodOptions) -> list[str] | None:
    """The sidecar's command line, or None when the job has no parameter server."""
    mode = spec.env.get(PS_MODE_ENV)
    if not mode:
        return None
    namespace = options.namespace
    argv = [
        *sidecar.command(options.python),
        "--job",
        spec.job_id,
        "--region",
        PS_REGION,
        "--mode",
        mode,
    ]
    staleness = spec.env.get(PS_STALENESS_ENV)
    if staleness:
        argv += ["--staleness", staleness]
    argv += ["--rank", str(spec.learner - 1), "--world", str(spec.num_learners)]
    argv += ["--listen", f"0.0.0.0:{PS_PORT}"]
    if spec.num_learners > 1:
        domain = f"{root_name(spec.job_id)}.{namespace}.svc"
        peers = [f"{hostname(n)}.{domain}:{PS_PORT}" for n in range(1, spec.num_learners + 1)]
        argv += ["--peers", ",".join(peers)]
    return argv


def _ps_sidecar(
    argv: list[str], image: str, env: list[dict[str, Any]], options: PodOptions
) -> dict[str, Any]:
    return {
        "name": PS_CONTAINER,
        "image": image,
        "imagePullPolicy": options.pull_policy,
        # A native sidecar: started before the learner, stopped once the learner ended, so
        # the pod's phase is the learner's.
        "restartPolicy": "Always",
        "command": argv,
        "env": env,
        "ports": [{"name": "ps", "containerPort": PS_PORT, "protocol": "TCP"}],
        "resources": {"requests": dict(PS_REQUESTS)},
        "volumeMounts": [
            {"name": "shm", "mountPath": SHM_DIR},
            {"name": "helper", "mountPath": TMP_DIR},
        ],
        "securityContext": _security_context(),
    }


def role_command(command: Sequence[str], role: str, python: str) -> list[str]:
    """The runner's command line for one part of the learner (`learner_image.pod`): the
    spec's `dlaas-learner [--job ...] -- COMMAND` run by the image's `python` in isolated
    mode, its part's name before its flags."""
    return [*runner_command(python), role, *command[1:]]


def pod_manifest(
    spec: LearnerSpec, options: PodOptions, owner: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    labels = job_labels(spec.job_id, "learner")
    labels[LEARNER_LABEL] = str(spec.learner)
    labels[ATTEMPT_LABEL] = str(spec.attempt)
    meta: dict[str, Any] = {
        "name": check_name(spec.name),
        "namespace": options.namespace,
        "labels": labels,
    }
    if owner is not None:
        meta["ownerReferences"] = [dict(owner)]
    image = options.gpu_image if spec.resources.gpus and options.gpu_image else options.image
    helpers = helper_env(spec, options)
    work = {"name": "work", "mountPath": WORK_DIR}
    helper_tmp = {"name": "helper", "mountPath": TMP_DIR}

    def container(name: str, role: str, env: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "name": name,
            "image": image,
            "imagePullPolicy": options.pull_policy,
            "command": role_command(spec.command, role, options.python),
            "workingDir": WORK_DIR,
            "env": env,
            "resources": {part: dict(amounts) for part, amounts in HELPER_RESOURCES.items()},
            "volumeMounts": [work, helper_tmp],
            "securityContext": _security_context(),
        }

    # The helpers' exit reports, kept with the pod's status for whoever reads it later.
    reported = {
        "terminationMessagePath": exit_reports.KUBERNETES_PATH,
        "terminationMessagePolicy": "File",
    }
    fetch = {**container(FETCH_CONTAINER, "fetch", helpers), **reported}
    shipper = {**container(SHIPPER_CONTAINER, "ship", helpers), **reported}
    program = {
        **container(PROGRAM_CONTAINER, "program", program_env(spec, options)),
        "resources": learner_resources(spec, options.ephemeral_storage),
        "volumeMounts": [
            {"name": "shm", "mountPath": SHM_DIR},
            work,
            {"name": "tmp", "mountPath": TMP_DIR},
        ],
    }
    shm: dict[str, Any] = {"medium": "Memory"}
    if spec.resources.memory_bytes:
        shm["sizeLimit"] = str(spec.resources.memory_bytes)
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",  # dlaas restarts learners itself, from the last checkpoint
        "terminationGracePeriodSeconds": options.stop_grace_s,
        "automountServiceAccountToken": False,  # learners need no Kubernetes API
        "enableServiceLinks": False,
        "shareProcessNamespace": False,  # no helper's /proc is the program's to read
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_USER,
            "runAsGroup": RUN_AS_USER,
            "fsGroup": RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "initContainers": [fetch],
        "containers": [program, shipper],
        "volumes": [
            {"name": "shm", "emptyDir": shm},
            {"name": "work", "emptyDir": {"sizeLimit": options.ephemeral_storage}},
            {"name": "tmp", "emptyDir": {"sizeLimit": TMP_LIMIT}},
            {"name": "helper", "emptyDir": {"sizeLimit": TMP_LIMIT}},
        ],
    }
    if spec.num_learners > 1:
        pod_spec["hostname"] = hostname(spec.learner)
        pod_spec["subdomain"] = root_name(spec.job_id)
    ps = ps_command(spec, options)
    if ps is not None:
        pod_spec["initContainers"].append(_ps_sidecar(ps, image, helpers, options))
    selector = dict(options.node_selector)
    if spec.node is not None:  # placed by the scheduler
        selector[HOSTNAME_LABEL] = spec.node
    if selector:
        pod_spec["nodeSelector"] = selector
    if options.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in options.tolerations]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec}
