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
(`due()` answering True -> `reset()`, and on to its commit when `reset` is handed the
background save's PendingCheckpoint), and `upload` the same bytes again plus the runner's
poll for new checkpoints (`UPLOAD_POLL_S`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from learner_image.sdk.environment import env

if TYPE_CHECKING:
    from learner_image.sdk.background_save import PendingCheckpoint

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
    >>> if timer.due(): timer.reset(save_checkpoint(...))
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
        self._saving: PendingCheckpoint | None = None  # a background save not yet seen done
        self._saving_since = 0.0

    @property
    def lead_s(self) -> float:
        """How long before the deadline a checkpoint must start: a step, a save, an upload."""
        return self.step_s + 2 * self.save_s + UPLOAD_POLL_S

    def due(self) -> bool:
        now = self._clock()
        self._follow_background_save(now)
        if self._last_call is not None:
            self.step_s = now - self._last_call
        self._last_call = now
        if self.interval_s <= 0 or now - self._anchor + self.lead_s < self.interval_s:
            return False
        self._due_at = now
        return True

    def reset(self, saving: PendingCheckpoint | None = None) -> None:
        """Call right after saving; hand it the PendingCheckpoint of a background save, so
        that the save's time counts until its commit."""
        now = self._clock()
        if self._due_at is not None:
            self.save_s = now - self._due_at
            self._anchor = self._due_at
        else:
            self._anchor = now
        self._saving, self._saving_since = saving, self._anchor
        self._due_at = None
        self._last_call = now  # the save is not part of the next step

    def _follow_background_save(self, now: float) -> None:
        saving = self._saving
        if saving is None:
            return
        if not saving.done():  # still writing: it takes at least this long
            self.save_s = max(self.save_s, now - self._saving_since)
            return
        if saving.status == "committed":  # seen at a step boundary: errs long by < a step
            self.save_s = now - self._saving_since
        self._saving = None
