"""From a job's manifest to the learners a backend creates: command, environment, resources.

A spec's `env` is the platform's alone; the manifest's `environment` is its `program_env`,
which reaches the user's program and no process of the platform (`learner_image.runner`).

Pure. The manifest is the normalized dict the API stored (memory in bytes, `checkpoint`
with `interval_s` and `keep`); missing blocks take the API's defaults.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from learner_image.runner_config import RUNNER_COMMAND
from lifecycle_manager.backends.base import LearnerSpec, Resources
from lifecycle_manager.decisions.restart_policy import RestartPolicy
from storage import job_redis_users, training_data
from storage.job_plan import elastic_batch
from storage.metric_regexes import metric_regexes
from storage.settings import Settings
from storage.training_data import training_data_store

RUNNER = RUNNER_COMMAND
DEFAULT_CHECKPOINT_INTERVAL = 30.0
DEFAULT_CHECKPOINT_KEEP = 2


JOB_OBJECTS_PATH = "/v2/job-objects"


def job_objects_url(settings: Settings) -> str:
    """The API's object gateway as learners reach it ("" when DLAAS_API_URL is not set)."""
    base = settings.api_url.strip().rstrip("/")
    return f"{base}{JOB_OBJECTS_PATH}" if base else ""


def storage_env(settings: Settings, job_id: str, job_token: str) -> dict[str, str]:
    """What a runner needs to reach the job's objects and Redis: the API's object gateway
    and the token minted for the job, with which it also signs in to Redis as the job's own
    user (`storage.job_redis_users`); never the object store's own settings or keys, nor the
    database's, nor Redis's password (a job's code could read them from the runner's
    environment)."""
    redis_url = settings.redis_url
    if settings.redis_job_users and job_token:
        redis_url = job_redis_users.learner_url(redis_url, job_id, job_token)
    return {
        "DLAAS_REDIS_URL": redis_url,
        "DLAAS_JOB_OBJECTS_URL": job_objects_url(settings),
        "DLAAS_JOB_TOKEN": job_token,
    }


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


def elastic_batch_of(manifest: Mapping[str, Any], num_learners: int) -> int | None:
    """The global batch of an elastic job with a batch range at this many learners."""
    elastic = _section(manifest, "elastic")
    return elastic_batch(
        num_learners,
        elastic.get("min_batch_size"),
        elastic.get("max_batch_size"),
        elastic.get("max_learner_batch_size"),
    )


def batch_env(global_batch: int, num_learners: int, learner: int) -> dict[str, str]:
    """`DLAAS_GLOBAL_BATCH_SIZE`, and this learner's share of it in `DLAAS_BATCH_SIZE` (the
    first learners take one more sample each when it does not divide evenly)."""
    share, extra = divmod(global_batch, num_learners)
    return {
        "DLAAS_GLOBAL_BATCH_SIZE": str(global_batch),
        "DLAAS_BATCH_SIZE": str(share + (1 if learner <= extra else 0)),
    }


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
    job_token: str = "",
) -> list[LearnerSpec]:
    """The gang of learners for one attempt of a job; `job_token` is the credential minted
    for the job (`storage.job_credentials`), which its runners use on the object gateway."""
    checkpoint = _section(manifest, "checkpoint")
    interval = float(checkpoint.get("interval_s", DEFAULT_CHECKPOINT_INTERVAL))
    keep = int(checkpoint.get("keep", DEFAULT_CHECKPOINT_KEEP))
    limits = resources(manifest)
    user_env = manifest.get("environment") or {}
    user = {str(key): str(value) for key, value in dict(user_env).items()}
    common = storage_env(settings, job_id, job_token)
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
    global_batch = elastic_batch_of(manifest, num_learners)
    command = str(_section(manifest, "framework").get("command", ""))
    specs = []
    for learner in range(1, num_learners + 1):
        env = dict(common, LEARNER_ID=str(learner), RANK=str(learner - 1))
        if global_batch is not None:
            env.update(batch_env(global_batch, num_learners, learner))
        argv = [RUNNER, "--job", job_id, "--learner", str(learner), "--attempt", str(attempt)]
        specs.append(
            LearnerSpec(
                job_id=job_id,
                learner=learner,
                attempt=attempt,
                num_learners=num_learners,
                command=[*argv, "--", command],
                env=env,
                # what dlaas sets for the learner, the user's environment does not replace
                program_env={k: v for k, v in user.items() if k not in env},
                resources=limits,
            )
        )
    return specs
