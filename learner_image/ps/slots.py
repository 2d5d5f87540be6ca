"""The slot protocol: a learner fills its gradient slot, the server drains it.

Each slot is a gradient buffer and two groups of counters, each written by one side only:

```
 learner writes: committed (c), lr, attach       server writes: drained (d), released (r), ...

       learner: write gradient, then c := c+1             server: apply, then d := c
   [writable: c == r] --------------------------> [ready: c > d] -----------------+
          ^                                                                        |
          |              server: r := d (when the mode's bound allows)             v
          +-------------------------------------------------------------- [drained: d > r]
```

Every transition has one writer, so there is no lock to hold and none to lose: a learner
killed at any point leaves either an uncommitted buffer (c unchanged, so the server never
reads it and the next writer overwrites it) or a committed one (applied exactly once, since
only the server moves d and it moves it past c exactly once). The learner writes the
gradient only while the slot is writable, and the server reads it only while it is ready,
so they never touch the buffer at the same time. A restarted learner claims the slot's lock,
bumps `attach` and waits for the server to acknowledge it and release the slot.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from learner_image.ps import failure
from learner_image.ps.policy import SlotView
from learner_image.ps.region import (
    L_ATTACH,
    L_COMMITTED,
    L_PID,
    V_ATTACH_ACK,
    V_DRAINED,
    V_READ_VERSION,
    V_RELEASED,
    Control,
    RegionPaths,
    Slot,
)
from learner_image.ps.shm import FileLock, is_locked

WAIT_SLICE_S = 0.05


class ServerGone(Exception):
    """The parameter server did not come back within the time the learner waits for it."""


class LearnerSlot:
    """The learner's side of one slot."""

    def __init__(self, control: Control, paths: RegionPaths, index: int) -> None:
        if not 0 <= index < control.slots_count:
            raise ValueError(
                f"slot {index} does not exist: this parameter server has "
                f"{control.slots_count} slot(s), 0..{control.slots_count - 1}"
            )
        self.index = index
        self.control = control
        self.paths = paths
        self.words: Slot = control.slots[index]
        self._lock = FileLock(paths.slot_lock(index))

    @property
    def committed(self) -> int:
        return int(self.words.learner[L_COMMITTED])

    @property
    def released(self) -> int:
        return int(self.words.server[V_RELEASED])

    @property
    def writable(self) -> bool:
        return self.released == self.committed

    def claim(self, timeout: float) -> None:
        """Take the slot (waiting for a dying predecessor to let go) and announce it."""
        self._lock.acquire(timeout, f"slot {self.index} is held by another learner")
        self.words.learner[L_PID] = os.getpid()
        self.words.learner[L_ATTACH] = int(self.words.learner[L_ATTACH]) + 1
        self.control.bell.post()

    @property
    def acknowledged(self) -> bool:
        return int(self.words.server[V_ATTACH_ACK]) == int(self.words.learner[L_ATTACH])

    def commit(self, lr: float) -> int:
        """Publish the gradient in the slot; returns its commit number."""
        if not self.writable:
            raise RuntimeError(f"slot {self.index}: commit while the previous one is pending")
        self.words.lr[0] = lr
        committed = self.committed + 1
        self.words.learner[L_COMMITTED] = committed
        self.control.bell.post()
        return committed

    def wait(
        self,
        condition: Callable[[], bool],
        timeout: float | None,
        on_server_down: Callable[[float], None] | None = None,
    ) -> None:
        """Block until `condition()` holds; the server being down only makes it wait longer.
        Raises `failure.ServerFailed` once the region serves no more."""
        started = time.monotonic()
        while not condition():
            self.words.bell.wait(WAIT_SLICE_S)
            if condition():
                return
            failure.check(self.paths, self.control)
            waited = time.monotonic() - started
            if timeout is not None and waited > timeout:
                raise ServerGone(
                    f"slot {self.index}: no answer from the parameter server in {timeout:.0f} s"
                )
            if on_server_down is not None and not is_locked(self.paths.server_lock):
                on_server_down(waited)

    def release_claim(self) -> None:
        self._lock.release()


def server_view(slot: Slot, alive: bool, index: int) -> SlotView:
    return SlotView(
        index=index,
        alive=alive,
        committed=int(slot.learner[L_COMMITTED]),
        drained=int(slot.server[V_DRAINED]),
        released=int(slot.server[V_RELEASED]),
        read_version=int(slot.server[V_READ_VERSION]),
    )


def release(slot: Slot, version: int) -> None:
    """Let the learner write its next gradient; it reads weights of at least `version`."""
    slot.server[V_READ_VERSION] = version
    slot.server[V_RELEASED] = int(slot.server[V_DRAINED])
    slot.bell.post()
