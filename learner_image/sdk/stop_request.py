"""SIGTERM as a request to stop at the next step boundary, after a checkpoint.

dlaas stops a learner with SIGTERM and kills it a grace period later (the node agent's
`--grace`, a pod's `terminationGracePeriodSeconds`; 30 s by default): when its job is halted,
when the scheduler preempts it for a job that needs its place, when its node goes away. A
program that dies at SIGTERM loses whatever it did since its last checkpoint; one that
watches for it saves the current step and loses nothing:

    stop = sdk.watch_for_stop()
    timer = sdk.CheckpointTimer()
    while training:
        ...one step...
        if timer.due() or stop.requested:
            saving = sdk.save_checkpoint(state, step)
            timer.reset(saving)
        if stop.requested:
            saving.wait()            # committed: the runner uploads it as the learner stops
            stop.exit()

With several learners, agree on the flag before acting on it (all-reduce `stop.requested`
with the step's statistics), so that every learner stops at the same step.

A second SIGTERM, or `grace_s` (20 s by default, inside the platform's 30) without reaching
`exit()`, ends the program at once with the same exit status, 143.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from types import FrameType

EXIT_STOPPED = 128 + signal.SIGTERM
DEFAULT_GRACE_S = 20.0


class StopRequest:
    """Whether the platform asked this learner to stop (`requested`)."""

    def __init__(self, grace_s: float = DEFAULT_GRACE_S) -> None:
        self.grace_s = grace_s
        self._requested = threading.Event()
        self._deadline: threading.Timer | None = None

    @property
    def requested(self) -> bool:
        return self._requested.is_set()

    def handle(self, signum: int, frame: FrameType | None = None) -> None:
        """The SIGTERM handler: the first asks, the second ends the program."""
        if self.requested:
            self.exit()
        self._requested.set()
        print(
            f"dlaas: SIGTERM received; checkpointing at the next step (at most {self.grace_s:g} s)",
            file=sys.stderr,
            flush=True,
        )
        self._deadline = threading.Timer(self.grace_s, self.exit)
        self._deadline.daemon = True
        self._deadline.start()

    def exit(self) -> None:
        """End the program with 143, as SIGTERM would have. Skips the interpreter's teardown:
        once a peer learner is gone, torch.distributed's threads can turn it into an abort."""
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(EXIT_STOPPED)


_installed: StopRequest | None = None
_install_lock = threading.Lock()


def watch_for_stop(grace_s: float = DEFAULT_GRACE_S) -> StopRequest:
    """The process's `StopRequest`, its SIGTERM handler installed by the first call (which must
    come from the main thread, as Python's signal handlers do). A later call returns the same
    one, whatever its `grace_s`."""
    global _installed
    with _install_lock:
        if _installed is None:
            request = StopRequest(grace_s)
            signal.signal(signal.SIGTERM, request.handle)
            _installed = request
        return _installed
