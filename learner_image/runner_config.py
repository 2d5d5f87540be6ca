"""The runner's configuration: its command line and environment, and the command's environment.

See `learner_image.runner` for the contract with the cluster backends.
"""

from __future__ import annotations

import argparse
import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from storage import output_keys
from storage.cluster_nodes import PRETEND_GPUS_ENV

# The platform's settings the runner needs and the program must not see: where the stores
# are and how to sign in to them (the job's token for the object gateway above all).
SECRET_ENV = (
    "DLAAS_JOB_TOKEN",
    "DLAAS_S3_ACCESS_KEY",
    "DLAAS_S3_SECRET_KEY",
    "DLAAS_DATABASE_URL",
    "DLAAS_REDIS_URL",
    "DLAAS_HOME",
    "DLAAS_OBJECTS_DIR",
    "DLAAS_AGENT_TOKEN",
    "DLAAS_AGENT_TOKEN_FILE",
)
PROGRAM_UID_ENV = "DLAAS_PROGRAM_UID"
RUNNER_DIR_ENV = "DLAAS_RUNNER_DIR"
SHARED_DIR_ENV = "DLAAS_SHARED_DIR"
# The program's own temporary directory, and `private` when the node lets the runner give
# the program a mount namespace of its own (`learner_image.program_sandbox`).
PROGRAM_TMPDIR_ENV = "DLAAS_PROGRAM_TMPDIR"
PROGRAM_MOUNTS_ENV = "DLAAS_PROGRAM_MOUNTS"
PRIVATE_MOUNTS = "private"
# The job's network namespace on the node, for the program to join (`job_network`).
PROGRAM_NETWORK_ENV = "DLAAS_PROGRAM_NETWORK"
# The user's environment (the manifest's `environment`, a JSON object): the runner applies
# it to the program alone. Carried as data in one variable, it changes nothing of how the
# runner itself starts (its interpreter, its imports, the libraries it loads).
PROGRAM_ENV_ENV = "DLAAS_PROGRAM_ENV"
# The runner's own settings, none of the program's business.
RUNNER_ENV = (
    PROGRAM_UID_ENV,
    RUNNER_DIR_ENV,
    SHARED_DIR_ENV,
    PROGRAM_ENV_ENV,
    PROGRAM_TMPDIR_ENV,
    PROGRAM_MOUNTS_ENV,
    PROGRAM_NETWORK_ENV,
)
# What dlaas tells every learner's program besides its directories and identity (and every
# DLAAS_* variable): the user's environment never replaces it.
CONTRACT_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GPU_COUNT")
# The runner as a learner spec names it (its console script), and as the platform starts it.
RUNNER_COMMAND = "dlaas-learner"
RUNNER_MODULE = "learner_image.runner"
DIR_ENV = {
    "MODEL_DIR": "model",
    "DATA_DIR": "data",
    "RESULT_DIR": "results",
    "LOG_DIR": "logs",
    "CHECKPOINT_DIR": "checkpoints",
}


class RunnerFailure(Exception):
    """The runner could not do its part; the message is the reason shown to the user."""


def runner_command(interpreter: str) -> list[str]:
    """The runner's command line up to its own flags: an absolute `interpreter` in isolated
    mode (`-I`: no PYTHON* variable, no user site-packages, no working directory on the
    import path), so nothing a job planted or set decides what code the runner runs."""
    return [interpreter, "-I", "-m", RUNNER_MODULE]


def program_env_variable(user_env: Mapping[str, str]) -> dict[str, str]:
    """The runner's variable carrying the user's environment to it (none for an empty one)."""
    return {PROGRAM_ENV_ENV: json.dumps(dict(user_env), sort_keys=True)} if user_env else {}


def program_env_of(environ: Mapping[str, str]) -> dict[str, str]:
    """The user's environment the runner was given for its program (RunnerFailure if the
    variable is not a JSON object of names to strings)."""
    raw = environ.get(PROGRAM_ENV_ENV, "").strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise RunnerFailure(f"{PROGRAM_ENV_ENV} is not a JSON object of names to strings")
    return value


@dataclass(frozen=True)
class RunnerConfig:
    job_id: str
    learner: int
    attempt: int
    num_learners: int
    command: str
    model_dir: Path
    data_dir: Path
    result_dir: Path
    log_dir: Path
    checkpoint_dir: Path
    data_prefix: str = ""
    metric_patterns: str = ""
    checkpoint_keep: int = 2
    upload_all_checkpoints: bool = False
    # Restarted on its own (`restart_policy.scope: learner`): keeps checkpoints of its own.
    own_checkpoints: bool = False
    stop_grace_s: float = 10.0
    extra_env: dict[str, str] = field(default_factory=dict)
    # The user's environment (the manifest's `environment`), for the program alone.
    program_env: dict[str, str] = field(default_factory=dict)
    # The program's own uid (its gid alike) when the runner is root: the program runs as it,
    # owns its directories, and can read nothing of the runner's.
    program_uid: int | None = None
    # With a program uid: the program's TMPDIR, whether it gets private /tmp, /var/tmp,
    # /dev/shm and /proc in a mount namespace of its own, and its job's network namespace.
    program_tmp: Path | None = None
    private_mounts: bool = False
    program_network: Path | None = None
    # Where the runner keeps its own files (the complete log and metrics it uploads): out
    # of the program's reach when the program has a uid of its own. Default: LOG_DIR.
    runner_dir: Path | None = None
    # In a Kubernetes learner pod: the directory the program's container shares with its
    # helpers (`learner_image.pod`). The program's container writes the log there, in LOG_DIR.
    shared_dir: Path | None = None
    # The GPUs the learner asked for on a node that only pretends to have them (it runs on
    # CPU); 0 elsewhere.
    pretend_gpus: int = 0

    @property
    def uploads_checkpoints(self) -> bool:
        return self.learner == 1 or self.upload_all_checkpoints or self.own_checkpoints

    @property
    def checkpoint_learner(self) -> int | None:
        """The learner whose own checkpoint series this learner uses; None: the gang's."""
        return self.learner if self.own_checkpoints else None

    @property
    def log_path(self) -> Path:
        if self.shared_dir is not None:
            return self.log_dir / f"learner-{self.learner}.log"
        return (self.runner_dir or self.log_dir) / f"learner-{self.learner}.log"

    @property
    def metrics_path(self) -> Path:
        return (self.runner_dir or self.log_dir) / f"learner-{self.learner}.metrics.jsonl"

    @property
    def program_dirs(self) -> tuple[Path, ...]:
        """The directories that are the program's own."""
        dirs = (self.model_dir, self.data_dir, self.result_dir, self.log_dir, self.checkpoint_dir)
        return (*dirs, self.program_tmp) if self.program_tmp is not None else dirs

    @property
    def log_key(self) -> str:
        return output_keys.log_key(self.job_id, self.learner)

    @property
    def metrics_key(self) -> str:
        return output_keys.metrics_key(self.job_id, self.learner)


def _int_env(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise RunnerFailure(f"environment variable {name}={raw!r} is not an integer") from None


def _float_env(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise RunnerFailure(f"environment variable {name}={raw!r} is not a number") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dlaas-learner",
        description="Run one dlaas learner: fetch the model and data, run the command, "
        "stream its logs and metrics, sync checkpoints, upload results.",
    )
    parser.add_argument("--job", help="job id (default: env TRAINING_ID)")
    parser.add_argument("--learner", type=int, help="1-based learner id (default: env LEARNER_ID)")
    parser.add_argument("--attempt", type=int, help="attempt number (default: env DLAAS_ATTEMPT)")
    return parser


def command_from(words: Sequence[str], environ: Mapping[str, str]) -> str:
    """The shell command: one word as is, several words quoted and joined, else the env."""
    if len(words) == 1:
        return words[0]
    if words:
        return shlex.join(words)
    return environ.get("DLAAS_COMMAND", "")


def parse_config(
    argv: Sequence[str], environ: Mapping[str, str], cwd: Path | None = None
) -> RunnerConfig:
    """Build the configuration from the command line and the environment (SystemExit on a
    bad command line, RunnerFailure on a bad environment)."""
    argv = list(argv)
    words: list[str] = []
    if "--" in argv:
        split = argv.index("--")
        argv, words = argv[:split], argv[split + 1 :]
    args = build_parser().parse_args(argv)
    base = cwd or Path.cwd()
    job_id = args.job or environ.get("TRAINING_ID", "").strip()
    if not job_id:
        raise RunnerFailure("no job id: pass --job JOB_ID or set TRAINING_ID")
    learner = args.learner if args.learner is not None else _int_env(environ, "LEARNER_ID", 1)
    attempt = args.attempt if args.attempt is not None else _int_env(environ, "DLAAS_ATTEMPT", 0)
    command = command_from(words, environ)
    if not command.strip():
        raise RunnerFailure("no command to run: pass it after `--` or set DLAAS_COMMAND")
    if learner < 1:
        raise RunnerFailure(f"learner id {learner} must be 1 or more")
    dirs = {
        name: (base / (environ.get(name, "").strip() or default)).absolute()
        for name, default in DIR_ENV.items()
    }
    keep = _int_env(environ, "DLAAS_CHECKPOINT_KEEP", 2)
    return RunnerConfig(
        job_id=job_id,
        learner=learner,
        attempt=attempt,
        num_learners=_int_env(environ, "NUM_LEARNERS", 1),
        command=command,
        model_dir=dirs["MODEL_DIR"],
        data_dir=dirs["DATA_DIR"],
        result_dir=dirs["RESULT_DIR"],
        log_dir=dirs["LOG_DIR"],
        checkpoint_dir=dirs["CHECKPOINT_DIR"],
        data_prefix=environ.get("DLAAS_DATA_PREFIX", "").strip(),
        metric_patterns=environ.get("DLAAS_METRIC_PATTERNS", ""),
        checkpoint_keep=max(1, keep),
        upload_all_checkpoints=environ.get("DLAAS_UPLOAD_ALL_CHECKPOINTS", "").strip()
        in ("1", "true", "yes"),
        own_checkpoints=environ.get("DLAAS_RESTART_SCOPE", "").strip() == "learner",
        stop_grace_s=_float_env(environ, "DLAAS_STOP_GRACE_S", 10.0),
        program_uid=_int_env(environ, PROGRAM_UID_ENV, -1)
        if environ.get(PROGRAM_UID_ENV)
        else None,
        program_tmp=Path(environ[PROGRAM_TMPDIR_ENV]) if environ.get(PROGRAM_TMPDIR_ENV) else None,
        private_mounts=environ.get(PROGRAM_MOUNTS_ENV) == PRIVATE_MOUNTS,
        program_network=Path(environ[PROGRAM_NETWORK_ENV])
        if environ.get(PROGRAM_NETWORK_ENV)
        else None,
        runner_dir=Path(environ[RUNNER_DIR_ENV]) if environ.get(RUNNER_DIR_ENV) else None,
        shared_dir=Path(environ[SHARED_DIR_ENV]) if environ.get(SHARED_DIR_ENV) else None,
        pretend_gpus=_int_env(environ, PRETEND_GPUS_ENV, 0),
        program_env=program_env_of(environ),
    )


def child_env(config: RunnerConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """The program's environment, in layers: the runner's own (its secrets and settings left
    out) and PYTHONUNBUFFERED=1 as defaults; the user's environment over them (their PATH,
    PYTHONPATH, LD_*: the program's business alone); and over both what dlaas tells every
    learner (its directories, identity, rank and rendezvous, DLAAS_*), which the user's never
    replaces."""
    inherited = {k: v for k, v in environ.items() if k not in SECRET_ENV and k not in RUNNER_ENV}
    env = {"PYTHONUNBUFFERED": "1", **inherited, **config.program_env}
    env.update({k: v for k, v in inherited.items() if k in CONTRACT_ENV or k.startswith("DLAAS_")})
    env.update(
        MODEL_DIR=str(config.model_dir),
        DATA_DIR=str(config.data_dir),
        RESULT_DIR=str(config.result_dir),
        LOG_DIR=str(config.log_dir),
        CHECKPOINT_DIR=str(config.checkpoint_dir),
        TRAINING_ID=config.job_id,
        LEARNER_ID=str(config.learner),
        NUM_LEARNERS=str(config.num_learners),
        DLAAS_ATTEMPT=str(config.attempt),
    )
    env.update(config.extra_env)
    return env
