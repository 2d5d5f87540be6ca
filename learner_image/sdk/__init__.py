"""The dlaas SDK: what training code imports to checkpoint, report metrics and find its dirs.

    from learner_image import sdk

    e = sdk.env()                                  # rank, world size, DATA_DIR, RESULT_DIR...
    ckpt = sdk.load_checkpoint()                   # newest committed checkpoint, or None
    timer = sdk.CheckpointTimer()                  # DLAAS_CHECKPOINT_INTERVAL seconds
    ...
    sdk.log_metrics(step, loss=0.31, accuracy=0.9)
    if timer.due():
        saving = sdk.save_checkpoint({"model": model.state_dict(), "step": step}, step)
        timer.reset(saving)

A learner is stopped with SIGTERM (a halt, a preemption), then killed after a grace period:
`stop = sdk.watch_for_stop()` turns the SIGTERM into `stop.requested`, so the loop can save
the current step and `stop.exit()` instead of losing the work since its last checkpoint.

`save_checkpoint` returns as soon as the state is copied in memory; a background thread
writes and commits it (`saving.wait()` waits for that; `blocking=True` saves as the call's
own work). A background save that fails is raised (`CheckpointSaveError`) by the next
`save_checkpoint`; the program's exit waits for the saves under way.

Importing it is light: torch is imported only by the calls that need it.
"""

from learner_image.sdk.background_save import (
    CheckpointSaveError,
    PendingCheckpoint,
    save_checkpoint,
    save_checkpoint_files,
    wait_for_checkpoints,
)
from learner_image.sdk.checkpoints import (
    Checkpoint,
    CommitRecord,
    checkpoint_name,
    committed_checkpoints,
    load_checkpoint,
    parse_checkpoint_name,
    verify_checkpoint,
)
from learner_image.sdk.environment import LearnerEnv, env
from learner_image.sdk.metrics import log_metrics
from learner_image.sdk.stop_request import EXIT_STOPPED, StopRequest, watch_for_stop
from learner_image.sdk.timer import CheckpointTimer, checkpoint_due

__all__ = [
    "EXIT_STOPPED",
    "Checkpoint",
    "CheckpointSaveError",
    "CheckpointTimer",
    "CommitRecord",
    "LearnerEnv",
    "PendingCheckpoint",
    "StopRequest",
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
    "wait_for_checkpoints",
    "watch_for_stop",
]
