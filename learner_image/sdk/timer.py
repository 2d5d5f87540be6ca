"""When to checkpoint: often enough that at most `DLAAS_CHECKPOINT_INTERVAL` seconds (default
30) of training ever lies past the newest checkpoint the platform holds.

A checkpoint protects the state of the moment it was taken, and only once it is committed and
the runner has uploaded it. So the timer does not wait for the interval to pass and then
save (the work at risk would grow to the interval plus a step, the save and the upload); it
saves at the last step boundary from which the checkpoint still lands in time:

```
 anchor (state of the newest checkpoint)                     anchor + interval
    |------ step ------|------ step ------|-- now: due? --|..step..|..save + upload..|
                                          due when  now + step + save + upload >= anchor + interval
```

`step` is the time between the last two `due()` calls, `save` how long the last save took
(`due()` answering True -> `reset()`), and `upload` the same bytes again plus the runner's
poll for new checkpoints (`UPLOAD_POLL_S`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from learner_image.sdk.environment import env

# How often the runner looks for a newly committed checkpoint to upload.
UPLOAD_POLL_S = 0.1


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
    """Says when a checkpoint is due; `reset()` right after saving one. Call `due()` once per
    step, at the step boundary where a checkpoint would be taken.

    >>> timer = CheckpointTimer()
    >>> if timer.due(): save_checkpoint(...); timer.reset()
    """

    def __init__(
        self, interval_s: float | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval_s = env().checkpoint_interval_s if interval_s is None else interval_s
        self._clock = clock
        self._anchor = clock()  # when the state the newest checkpoint holds was current
        self._last_call: float | None = None
        self._due_at: float | None = None
        self.step_s = 0.0
        self.save_s = 0.0

    @property
    def lead_s(self) -> float:
        """How long before the deadline a checkpoint must start: a step, a save, an upload."""
        return self.step_s + 2 * self.save_s + UPLOAD_POLL_S

    def due(self) -> bool:
        now = self._clock()
        if self._last_call is not None:
            self.step_s = now - self._last_call
        self._last_call = now
        if self.interval_s <= 0 or now - self._anchor + self.lead_s < self.interval_s:
            return False
        self._due_at = now
        return True

    def reset(self) -> None:
        now = self._clock()
        if self._due_at is not None:
            self.save_s = now - self._due_at
            self._anchor = self._due_at
        else:
            self._anchor = now
        self._due_at = None
        self._last_call = now  # the save is not part of the next step
