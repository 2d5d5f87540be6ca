"""When to checkpoint: every `DLAAS_CHECKPOINT_INTERVAL` seconds (default 30)."""

from __future__ import annotations

import time
from collections.abc import Callable

from learner_image.sdk.environment import env


def checkpoint_due(last_time: float, *, now: float | None = None) -> bool:
    """True when `DLAAS_CHECKPOINT_INTERVAL` seconds have passed since `last_time`.

    Times are `time.monotonic()` values. An interval of 0 or less turns time-based
    checkpoints off (never due).
    """
    interval = env().checkpoint_interval_s
    if interval <= 0:
        return False
    return (time.monotonic() if now is None else now) - last_time >= interval


class CheckpointTimer:
    """Says when a checkpoint is due; `reset()` after saving one.

    >>> timer = CheckpointTimer()
    >>> if timer.due(): save_checkpoint(...); timer.reset()
    """

    def __init__(
        self, interval_s: float | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval_s = env().checkpoint_interval_s if interval_s is None else interval_s
        self._clock = clock
        self._last = clock()

    def due(self) -> bool:
        return self.interval_s > 0 and self._clock() - self._last >= self.interval_s

    def reset(self) -> None:
        self._last = self._clock()
