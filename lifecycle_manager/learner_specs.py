"""From a job's manifest to the learners a backend creates: command, environment, resources.

Pure. The manifest is the normalized dict the API stored (memory in bytes, `checkpoint`
with `interval_s` and `keep`); missing blocks take the API's defaults.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from lifecycle_manager.backends.base import LearnerSpec, Resources
from lifecycle_manager.restart_policy import RestartPolicy
from storage import training_data
from storage.metric_regexes import metric_regexes
from storage.settings import Settings
from storage.training_data import training_data_store

RUNNER = "dlaas-learner"
DEFAULT_CHECKPOINT_INTERVAL = 30.0
DEFAULT_CHECKPOINT_KEEP = 2


def storage_env(settings: Settings) -> dict[str, str]:
    """The storage settings a runner needs to reach the object store and Redis."""
    env = {
        "DLAAS_HOME": str(settings.home),
        "DLAAS_REDIS_URL": settings.redis_url,
        "DLAAS_OBJECT_STORE": settings.object_store,
        "DLAAS_OBJECTS_DIR": str(settings.objects_dir),
        "DLAAS_S3_BUCKET": settings.s3_bucket,
        "DLAAS_S3_REGION": settings.s3_region,
    }
    optional = {
        "DLAAS_S3_ENDPOINT_URL": settings.s3_endpoint_url,
        "DLAAS_S3_ACCESS_KEY": settings.s3_access_key,
        "DLAAS_S3_SECRET_KEY": settings.s3_secret_key,
    }
    env.update({key: value for key, value in optional.items() if value})
    return env


def _section(manifest: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = manifest.get(name)
    return value if isinstance(value, Mapping) else {}


def data_prefix(manifest: Mapping[str, Any], owner_id: int) -> str:
    """`data/{owner}/{container}/` of the job's training data, or "" without one."""
    store = training_data_store(manifest)
    return "" if store is None else training_data.data_prefix(owner_id, store[1])


def parameter_server_env(manifest: Mapping[str, Any]) -> dict[str, str]:
    """`DLAAS_PS_MODE` (and `DLAAS_PS_STALENESS`) when the job asks for a parameter server;
    a backend starts the sidecar for such learners."""
    if not isinstance(manifest.get("parameter_server"), Mapping):
        return {}
    block = _section(manifest, "parameter_server")
    env = {"DLAAS_PS_MODE": str(block.get("mode") or "async")}
    if block.get("staleness") is not None:
        env["DLAAS_PS_STALENESS"] = str(block["staleness"])
    return env


def resources(manifest: Mapping[str, Any]) -> Resources:
    """Per-learner resources; the stored manifest holds memory in bytes."""
    memory = manifest.get("memory")
    cpus = manifest.get("cpus")
    return Resources(
        cpus=float(cpus) if cpus is not None else None,
        memory_bytes=int(memory) if memory is not None else None,
        gpus=int(manifest.get("gpus") or 0),
    )


def learner_specs(
    *,
    job_id: str,
    owner_id: int,
    attempt: int,
    num_learners: int,
    manifest: Mapping[str, Any],
    settings: Settings,
) -> list[LearnerSpec]:
    """The gang of learners for one attempt of a job."""
    checkpoint = _section(manifest, "checkpoint")
    interval = float(checkpoint.get("interval_s", DEFAULT_CHECKPOINT_INTERVAL))
    keep = int(checkpoint.get("keep", DEFAULT_CHECKPOINT_KEEP))
    limits = resources(manifest)
    user_env = manifest.get("environment") or {}
    common = {str(key): str(value) for key, value in dict(user_env).items()}
    common.update(storage_env(settings))
    common.update(
        {
            "TRAINING_ID": job_id,
            "NUM_LEARNERS": str(num_learners),
            "WORLD_SIZE": str(num_learners),
            "GPU_COUNT": str(limits.gpus),
            "DLAAS_ATTEMPT": str(attempt),
            "DLAAS_CHECKPOINT_INTERVAL": str(interval),
            "DLAAS_CHECKPOINT_KEEP": str(keep),
            "DLAAS_RESTART_SCOPE": RestartPolicy.from_manifest(manifest).scope.value,
            "DLAAS_DATA_PREFIX": data_prefix(manifest, owner_id),
            "DLAAS_METRIC_PATTERNS": json.dumps(metric_regexes(manifest)),
            "PYTHONUNBUFFERED": "1",
        }
    )
    common.update(parameter_server_env(manifest))
    command = str(_section(manifest, "framework").get("command", ""))
    specs = []
    for learner in range(1, num_learners + 1):
        env = dict(common, LEARNER_ID=str(learner), RANK=str(learner - 1))
        argv = [RUNNER, "--job", job_id, "--learner", str(learner), "--attempt", str(attempt)]
        specs.append(
            LearnerSpec(
                job_id=job_id,
                learner=learner,
                attempt=attempt,
                num_learners=num_learners,
                command=[*argv, "--", command],
                env=env,
                resources=limits,
            )
        )
    return specs
