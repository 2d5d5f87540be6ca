import json
from pathlib import Path

from lifecycle_manager.backends.base import Resources, learner_name
from lifecycle_manager.glue.learner_specs import learner_specs
from storage.settings import Settings

MANIFEST = {
    "name": "digits",
    "learners": 2,
    "cpus": 1.5,
    "gpus": 0,
    "memory": 2 * 1024**3,
    "framework": {"name": "pytorch", "command": "python train.py --epochs 2"},
    "data_stores": [{"id": "d", "training_data": {"container": "digits"}}],
    "evaluation_metrics": {
        "groups": {"a": {"regex": "acc=(?P<acc>[0-9.]+)"}},
        "regex": ["loss=(?P<loss>[0-9.]+)", "acc=(?P<acc>[0-9.]+)"],
    },
    "checkpoint": {"interval_s": 12.5, "keep": 3},
    "environment": {"LR": "0.1"},
}


def settings(tmp_path: Path) -> Settings:
    return Settings(
        home=tmp_path,
        redis_url="redis://:platform-pw@r:6379/2",
        database_url="postgresql+asyncpg://db/dlaas",
        s3_access_key="s3key",
        s3_secret_key="s3cret",
        api_url="http://api.example:8470/",
    )


def test_one_spec_per_learner_with_the_runner_command(tmp_path: Path) -> None:
    specs = learner_specs(
        job_id="training-abc",
        owner_id=7,
        attempt=3,
        num_learners=2,
        manifest=MANIFEST,
        settings=settings(tmp_path),
    )
    assert [spec.name for spec in specs] == [
        learner_name("training-abc", 1, 3),
        learner_name("training-abc", 2, 3),
    ]
    assert specs[0].name == "dlaas-training-abc-learner-1-a3"
    assert specs[1].command == [
        "dlaas-learner", "--job", "training-abc", "--learner", "2", "--attempt", "3",
        "--", "python train.py --epochs 2",
    ]  # fmt: skip
    assert specs[0].resources == Resources(cpus=1.5, memory_bytes=2 * 1024**3, gpus=0)


def test_the_environment_follows_the_spec(tmp_path: Path) -> None:
    spec = learner_specs(
        job_id="training-abc",
        owner_id=7,
        attempt=3,
        num_learners=2,
        manifest=MANIFEST,
        settings=settings(tmp_path),
        job_token="dlaasjob_t0ken",
    )[1]
    env = spec.env
    assert {key: env[key] for key in ("TRAINING_ID", "LEARNER_ID", "RANK")} == {
        "TRAINING_ID": "training-abc",
        "LEARNER_ID": "2",
        "RANK": "1",
    }
    assert env["NUM_LEARNERS"] == env["WORLD_SIZE"] == "2"
    assert env["GPU_COUNT"] == "0"
    assert env["DLAAS_ATTEMPT"] == "3"
    assert env["DLAAS_CHECKPOINT_INTERVAL"] == "12.5"
    assert env["DLAAS_CHECKPOINT_KEEP"] == "3"
    assert env["DLAAS_DATA_PREFIX"] == "data/7/digits/"
    assert json.loads(env["DLAAS_METRIC_PATTERNS"]) == [
        "acc=(?P<acc>[0-9.]+)",
        "loss=(?P<loss>[0-9.]+)",
    ]
    # Redis as the job's own user, signing in with the job's token: not the platform's password.
    assert env["DLAAS_REDIS_URL"] == "redis://dlaas-job-training-abc:dlaasjob_t0ken@r:6379/2"
    assert "platform-pw" not in json.dumps(env)
    # The job's objects through the API's gateway with the job's own token, and nothing of
    # the platform's: no store keys or objects directory, no database, no home.
    assert env["DLAAS_JOB_OBJECTS_URL"] == "http://api.example:8470/v2/job-objects"
    assert env["DLAAS_JOB_TOKEN"] == "dlaasjob_t0ken"
    for platform_setting in (
        "DLAAS_OBJECTS_DIR",
        "DLAAS_OBJECT_STORE",
        "DLAAS_S3_ACCESS_KEY",
        "DLAAS_S3_SECRET_KEY",
        "DLAAS_S3_ENDPOINT_URL",
        "DLAAS_DATABASE_URL",
        "DLAAS_HOME",
    ):
        assert platform_setting not in env
    assert "s3cret" not in env.values() and "s3key" not in env.values()
    assert env["PYTHONUNBUFFERED"] == "1"
    # The user's environment is the program's, kept apart from the platform's.
    assert "LR" not in env
    assert spec.program_env == {"LR": "0.1"}


def test_a_bare_manifest_takes_the_defaults(tmp_path: Path) -> None:
    manifest = {"framework": {"command": "true"}}
    (spec,) = learner_specs(
        job_id="j", owner_id=1, attempt=1, num_learners=1, manifest=manifest,
        settings=settings(tmp_path),
    )  # fmt: skip
    assert spec.env["DLAAS_DATA_PREFIX"] == ""
    assert spec.env["DLAAS_METRIC_PATTERNS"] == "[]"
    assert spec.env["DLAAS_CHECKPOINT_INTERVAL"] == "30.0"
    assert spec.env["DLAAS_CHECKPOINT_KEEP"] == "2"
    assert spec.env["DLAAS_RESTART_SCOPE"] == "gang"
    assert spec.resources == Resources()


def test_learners_restarted_on_their_own_are_told_so(tmp_path: Path) -> None:
    manifest = {"framework": {"command": "true"}, "restart_policy": {"scope": "learner"}}
    specs = learner_specs(
        job_id="j", owner_id=1, attempt=1, num_learners=2, manifest=manifest,
        settings=settings(tmp_path),
    )  # fmt: skip
    assert [spec.env["DLAAS_RESTART_SCOPE"] for spec in specs] == ["learner", "learner"]


def test_user_environment_cannot_override_what_dlaas_sets(tmp_path: Path) -> None:
    manifest = {"framework": {"command": "true"}, "environment": {"RANK": "9", "DLAAS_X": "1"}}
    (spec,) = learner_specs(
        job_id="j", owner_id=1, attempt=1, num_learners=1, manifest=manifest,
        settings=settings(tmp_path),
    )  # fmt: skip
    assert spec.env["RANK"] == "0"
    assert spec.program_env == {"DLAAS_X": "1"}


def test_the_users_path_and_preloads_stay_out_of_the_platforms_environment(
    tmp_path: Path,
) -> None:
    user = {"PATH": "/tmp/planted", "PYTHONPATH": "/tmp/planted", "LD_PRELOAD": "/tmp/x.so"}
    manifest = {"framework": {"command": "true"}, "environment": user}
    for spec in learner_specs(
        job_id="j", owner_id=1, attempt=1, num_learners=2, manifest=manifest,
        settings=settings(tmp_path),
    ):  # fmt: skip
        assert not set(user) & set(spec.env)
        assert spec.program_env == user


def test_without_job_users_learners_get_the_platforms_redis(tmp_path: Path) -> None:
    """`DLAAS_REDIS_JOB_USERS=false`, for a Redis that refuses ACL commands."""
    plain = settings(tmp_path).model_copy(update={"redis_job_users": False})
    [spec] = learner_specs(
        job_id="training-abc",
        owner_id=7,
        attempt=1,
        num_learners=1,
        manifest=MANIFEST,
        settings=plain,
        job_token="dlaasjob_t0ken",
    )
    assert spec.env["DLAAS_REDIS_URL"] == "redis://:platform-pw@r:6379/2"


def test_an_elastic_job_learns_its_global_batch_and_each_learner_its_share(
    tmp_path: Path,
) -> None:
    manifest = {
        "framework": {"command": "true"},
        "elastic": {"min_learners": 1, "max_learners": 4, "min_batch_size": 8,
                    "max_batch_size": 100},
    }  # fmt: skip
    specs = learner_specs(
        job_id="j", owner_id=1, attempt=2, num_learners=3, manifest=manifest,
        settings=settings(tmp_path),
    )  # fmt: skip
    # the largest batch of 8..100 that splits whole among 3
    assert {s.env["DLAAS_GLOBAL_BATCH_SIZE"] for s in specs} == {"99"}
    assert [s.env["DLAAS_BATCH_SIZE"] for s in specs] == ["33", "33", "33"]
    assert all(s.env["NUM_LEARNERS"] == "3" for s in specs)
    (plain,) = learner_specs(
        job_id="j", owner_id=1, attempt=1, num_learners=1,
        manifest={"framework": {"command": "true"}}, settings=settings(tmp_path),
    )  # fmt: skip
    assert "DLAAS_GLOBAL_BATCH_SIZE" not in plain.env and "DLAAS_BATCH_SIZE" not in plain.env
