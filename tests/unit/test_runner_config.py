"""The runner's command line, environment and exit reporting."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from learner_image.exit_report import describe_exit
from learner_image.runner_config import (
    RunnerFailure,
    child_env,
    command_from,
    parse_config,
    program_env_variable,
)


def test_flags_and_command_after_double_dash(tmp_path: Path) -> None:
    config = parse_config(
        ["--job", "training-abc", "--learner", "2", "--attempt", "1", "--", "python train.py"],
        {"NUM_LEARNERS": "2", "MODEL_DIR": "/m"},
        cwd=tmp_path,
    )
    assert (config.job_id, config.learner, config.attempt) == ("training-abc", 2, 1)
    assert config.command == "python train.py"
    assert config.model_dir == Path("/m")
    assert config.data_dir == tmp_path / "data"
    assert config.num_learners == 2
    assert not config.uploads_checkpoints
    assert config.log_key == "jobs/training-abc/logs/learner-2.log"


def test_everything_from_the_environment(tmp_path: Path) -> None:
    environ = {
        "TRAINING_ID": "training-x",
        "LEARNER_ID": "1",
        "DLAAS_ATTEMPT": "3",
        "DLAAS_COMMAND": "echo hi",
        "DLAAS_CHECKPOINT_KEEP": "5",
        "DLAAS_STOP_GRACE_S": "2.5",
        "DLAAS_DATA_PREFIX": "data/u/c",
        "CHECKPOINT_DIR": "ck",
    }
    config = parse_config([], environ, cwd=tmp_path)
    assert (config.job_id, config.learner, config.attempt) == ("training-x", 1, 3)
    assert config.command == "echo hi"
    assert config.checkpoint_keep == 5
    assert config.stop_grace_s == 2.5
    assert config.data_prefix == "data/u/c"
    assert config.checkpoint_dir == tmp_path / "ck"
    assert config.uploads_checkpoints


def test_several_words_are_quoted_for_the_shell() -> None:
    assert (
        command_from(["python", "-c", "print('a b')"], {}) == "python -c 'print('\"'\"'a b'\"'\"')'"
    )
    assert command_from([], {"DLAAS_COMMAND": "x"}) == "x"


def test_missing_job_or_command_is_a_runner_failure(tmp_path: Path) -> None:
    with pytest.raises(RunnerFailure, match="job id"):
        parse_config(["--", "true"], {}, cwd=tmp_path)
    with pytest.raises(RunnerFailure, match="no command"):
        parse_config(["--job", "j"], {}, cwd=tmp_path)
    with pytest.raises(RunnerFailure, match="LEARNER_ID"):
        parse_config(["--job", "j", "--", "true"], {"LEARNER_ID": "one"}, cwd=tmp_path)


def test_upload_all_checkpoints_flag(tmp_path: Path) -> None:
    config = parse_config(
        ["--job", "j", "--learner", "3", "--", "true"],
        {"DLAAS_UPLOAD_ALL_CHECKPOINTS": "1"},
        cwd=tmp_path,
    )
    assert config.uploads_checkpoints


def test_a_learner_restarted_on_its_own_keeps_checkpoints_of_its_own(tmp_path: Path) -> None:
    argv = ["--job", "j", "--learner", "2", "--", "true"]
    gang = parse_config(argv, {"DLAAS_RESTART_SCOPE": "gang"}, cwd=tmp_path)
    assert not gang.uploads_checkpoints and gang.checkpoint_learner is None
    own = parse_config(argv, {"DLAAS_RESTART_SCOPE": "learner"}, cwd=tmp_path)
    assert own.uploads_checkpoints and own.checkpoint_learner == 2


def test_child_env_drops_store_secrets_and_sets_dirs(tmp_path: Path) -> None:
    config = parse_config(["--job", "j", "--", "true"], {}, cwd=tmp_path)
    env = child_env(config, {"DLAAS_S3_SECRET_KEY": "s", "PATH": "/bin", "DLAAS_REDIS_URL": "r"})
    assert "DLAAS_S3_SECRET_KEY" not in env
    assert env["PATH"] == "/bin"
    assert "DLAAS_REDIS_URL" not in env  # the runner's to report with, not the program's
    assert env["RESULT_DIR"] == str(tmp_path / "results")
    assert env["TRAINING_ID"] == "j"
    assert env["LEARNER_ID"] == "1"
    assert env["PYTHONUNBUFFERED"] == "1"


def test_the_users_environment_is_the_programs_over_defaults_under_dlaas_own(
    tmp_path: Path,
) -> None:
    user = {"PATH": "/planted", "LD_PRELOAD": "/x.so", "HOME": "/h", "RANK": "7", "OMP": "2"}
    environ = {
        "PATH": "/bin",
        "HOME": "/root",
        "RANK": "0",
        "DLAAS_PS_DIR": "/dev/shm/p",
        "DLAAS_JOB_TOKEN": "t",
        **program_env_variable({**user, "DLAAS_PS_DIR": "/elsewhere", "TRAINING_ID": "x"}),
    }
    config = parse_config(["--job", "j", "--", "true"], environ, cwd=tmp_path)
    env = child_env(config, environ)
    assert [env[key] for key in ("PATH", "LD_PRELOAD", "HOME", "OMP")] == [
        "/planted",
        "/x.so",
        "/h",
        "2",
    ]
    assert (env["RANK"], env["DLAAS_PS_DIR"], env["TRAINING_ID"]) == ("0", "/dev/shm/p", "j")
    assert "DLAAS_JOB_TOKEN" not in env and "DLAAS_PROGRAM_ENV" not in env


def test_a_program_environment_that_is_not_an_object_of_strings_is_a_runner_failure(
    tmp_path: Path,
) -> None:
    for raw in ("[1]", "{", '{"A": 1}'):
        with pytest.raises(RunnerFailure, match="DLAAS_PROGRAM_ENV"):
            parse_config(["--job", "j", "--", "true"], {"DLAAS_PROGRAM_ENV": raw}, cwd=tmp_path)


def test_describe_exit_codes_and_signals() -> None:
    assert describe_exit(0).exit_code == 0
    plain = describe_exit(2)
    assert (plain.exit_code, plain.signal, plain.stopped) == (2, None, False)
    assert "code 2" in plain.reason
    killed = describe_exit(-signal.SIGKILL)
    assert (killed.exit_code, killed.signal) == (137, "SIGKILL")
    assert "out of memory" in killed.reason
    segv = describe_exit(-signal.SIGSEGV)
    assert (segv.exit_code, segv.signal) == (139, "SIGSEGV")
    assert "out of memory" not in segv.reason
    via_shell = describe_exit(137)
    assert (via_shell.exit_code, via_shell.signal) == (137, "SIGKILL")
    assert "out of memory" in via_shell.reason


def test_describe_exit_when_stopped() -> None:
    stopped = describe_exit(-signal.SIGTERM, stop_signal=signal.SIGTERM)
    assert (stopped.exit_code, stopped.signal, stopped.stopped) == (143, "SIGTERM", True)
    assert stopped.reason == "stopped by SIGTERM"
    forced = describe_exit(-signal.SIGKILL, signal.SIGTERM, killed_after_grace=True)
    assert forced.exit_code == 137
    assert "after the grace period" in forced.reason
    handled = describe_exit(0, stop_signal=signal.SIGINT)
    assert (handled.exit_code, handled.signal) == (130, "SIGINT")
    assert handled.reason == "stopped by SIGINT (the command then exited with code 0)"
