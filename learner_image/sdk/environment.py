"""The learner environment dlaas sets for every learner, with defaults for running locally.

Inside dlaas every value comes from the environment the cluster backend sets. Outside dlaas
(a user running `python train.py` on a laptop) the same code works: one learner of rank 0,
data read from the current directory, results and checkpoints written under it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CHECKPOINT_INTERVAL_S = 30.0
DEFAULT_CHECKPOINT_KEEP = 2


@dataclass(frozen=True)
class LearnerEnv:
    training_id: str
    learner_id: int
    num_learners: int
    rank: int
    world_size: int
    gpu_count: int
    attempt: int
    data_dir: Path
    model_dir: Path
    result_dir: Path
    log_dir: Path
    checkpoint_dir: Path
    master_addr: str | None
    master_port: int | None
    checkpoint_interval_s: float
    checkpoint_keep: int
    # `restart_policy.scope: learner`: each learner is restarted on its own, from checkpoints
    # of its own, so every learner writes them, not only rank 0.
    own_checkpoints: bool = False
    # An elastic job with a batch range: the global batch of this attempt, and this
    # learner's share of it (None outside such a job: the program keeps its own batch).
    global_batch_size: int | None = None
    batch_size: int | None = None

    def scaled_lr(self, base_lr: float, base_batch: int) -> float:
        """The learning rate for this attempt's global batch by the linear scaling rule
        (Goyal et al., 2017): `base_lr` was tuned at a global batch of `base_batch`, and a
        batch k times larger takes a rate k times larger. Outside an elastic job with a
        batch range, `base_lr` unchanged."""
        if self.global_batch_size is None:
            return base_lr
        return base_lr * self.global_batch_size / base_batch

    @property
    def is_distributed(self) -> bool:
        """True when the job has more than one learner (torch.distributed is needed)."""
        return self.world_size > 1

    @property
    def is_chief(self) -> bool:
        """True on rank 0, the learner that writes checkpoints and results."""
        return self.rank == 0

    @property
    def writes_checkpoints(self) -> bool:
        """True on the learners whose checkpoints are kept: rank 0, or every learner that
        keeps checkpoints of its own."""
        return self.is_chief or self.own_checkpoints

    @property
    def in_dlaas(self) -> bool:
        """True when running as a dlaas learner rather than a local script."""
        return self.training_id != "local"


def _int(environ: Mapping[str, str], name: str, default: int | None) -> int | None:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from None


def _float(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not a number") from None


def _path(environ: Mapping[str, str], name: str, default: Path) -> Path:
    raw = environ.get(name, "").strip()
    return Path(raw) if raw else default


def env(environ: Mapping[str, str] | None = None) -> LearnerEnv:
    """Read the learner environment (`os.environ` unless given), filling in local defaults."""
    e = os.environ if environ is None else environ
    cwd = Path.cwd()
    learner_id = _int(e, "LEARNER_ID", None)
    rank = _int(e, "RANK", None)
    if rank is None:
        rank = learner_id - 1 if learner_id is not None else 0
    if learner_id is None:
        learner_id = rank + 1
    num_learners = _int(e, "NUM_LEARNERS", None)
    world_size = _int(e, "WORLD_SIZE", None)
    if world_size is None:
        world_size = num_learners if num_learners is not None else 1
    if num_learners is None:
        num_learners = world_size
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"RANK={rank} must be in [0, WORLD_SIZE={world_size})")
    keep = _int(e, "DLAAS_CHECKPOINT_KEEP", DEFAULT_CHECKPOINT_KEEP)
    assert keep is not None
    if keep < 1:
        raise ValueError(f"DLAAS_CHECKPOINT_KEEP={keep} must be at least 1")
    return LearnerEnv(
        training_id=e.get("TRAINING_ID", "").strip() or "local",
        learner_id=learner_id,
        num_learners=num_learners,
        rank=rank,
        world_size=world_size,
        gpu_count=_int(e, "GPU_COUNT", 0) or 0,
        attempt=_int(e, "DLAAS_ATTEMPT", 0) or 0,
        data_dir=_path(e, "DATA_DIR", cwd),
        model_dir=_path(e, "MODEL_DIR", cwd),
        result_dir=_path(e, "RESULT_DIR", cwd / "results"),
        log_dir=_path(e, "LOG_DIR", cwd / "logs"),
        checkpoint_dir=_path(e, "CHECKPOINT_DIR", cwd / "checkpoints"),
        master_addr=e.get("MASTER_ADDR", "").strip() or None,
        master_port=_int(e, "MASTER_PORT", None),
        checkpoint_interval_s=_float(e, "DLAAS_CHECKPOINT_INTERVAL", DEFAULT_CHECKPOINT_INTERVAL_S),
        checkpoint_keep=keep,
        own_checkpoints=e.get("DLAAS_RESTART_SCOPE", "").strip() == "learner",
        global_batch_size=_int(e, "DLAAS_GLOBAL_BATCH_SIZE", None),
        batch_size=_int(e, "DLAAS_BATCH_SIZE", None),
    )
