"""The dlaas SDK: what training code imports to checkpoint, report metrics and find its dirs.

    from learner_image import sdk

    e = sdk.env()                                  # rank, world size, DATA_DIR, RESULT_DIR...
    ckpt = sdk.load_checkpoint()                   # newest committed checkpoint, or None
    timer = sdk.CheckpointTimer()                  # DLAAS_CHECKPOINT_INTERVAL seconds
    ...
    sdk.log_metrics(step, loss=0.31, accuracy=0.9)
    if timer.due():
        sdk.save_checkpoint({"model": model.state_dict(), "step": step}, step)
        timer.reset()

Importing it is light: torch is imported only by the calls that need it.
"""

from learner_image.sdk.checkpoints import (
    Checkpoint,
    CommitRecord,
    checkpoint_name,
    committed_checkpoints,
    load_checkpoint,
    parse_checkpoint_name,
    save_checkpoint,
    save_checkpoint_files,
    verify_checkpoint,
)
from learner_image.sdk.environment import LearnerEnv, env
from learner_image.sdk.metrics import log_metrics
from learner_image.sdk.timer import CheckpointTimer, checkpoint_due

__all__ = [
    "Checkpoint",
    "CheckpointTimer",
    "CommitRecord",
    "LearnerEnv",
    "checkpoint_due",
    "checkpoint_name",
    "committed_checkpoints",
    "env",
    "load_checkpoint",
    "log_metrics",
    "parse_checkpoint_name",
    "save_checkpoint",
    "save_checkpoint_files",
    "verify_checkpoint",
]
