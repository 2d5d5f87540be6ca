"""Which gradients the server applies next and which learners it lets go on: pure decisions.

The server calls these on a snapshot of the slot words; the tests call them on made-up ones.

Staleness, as each mode bounds it:

- async and sync bound the *version staleness* of every gradient: how many updates were
  applied between the moment its learner was released (and so read the weights) and the
  moment the gradient is applied. Each in-flight learner has an age (updates since its
  release); one whose age has reached the bound must be in the very next update. So when
  any learner is at the bound, the server waits for all such learners' gradients and
  applies them together with whatever else is ready, as one update; otherwise it applies
  the ready gradients oldest first, each as an update of its own (Downpour), as many as
  keep every gradient and every learner still computing within the bound (the server
  fuses such a run into one pass over memory). Sync is the bound 0: every update is the sum
  of all learners' gradients. No wait is circular: the server only waits for learners that
  are computing, never for a ready gradient, and a learner that dies stops counting.
- bounded bounds the *clock gap* (stale-synchronous parallel): a learner's clock is the
  number of its gradients applied; it is released for its next step only while its clock
  is at most `bound` ahead of the slowest live learner's (here and, across sidecars, the
  clocks peers report). Gradients are applied as they arrive, each an update of its own.
  The slowest learner is never held, so someone can always move.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from learner_image.ps.layout import Mode


@dataclass(frozen=True)
class SlotView:
    """What the server knows about one slot at a decision point."""

    index: int
    alive: bool  # a learner holds the slot's lock and the server acknowledged it
    committed: int
    drained: int  # the last commit taken out of the slot
    released: int
    read_version: int

    @property
    def ready(self) -> bool:
        """A committed gradient waits to be applied (even if its learner died since)."""
        return self.committed > self.drained

    @property
    def in_flight(self) -> bool:
        """Released and computing (or ready): its age counts against the bound."""
        return self.alive and self.released == self.drained


class Group(NamedTuple):
    """What the server applies next: the gradients of `slots`, in that order."""

    slots: list[int]
    with_remote: bool  # a pending update from peer sidecars joins
    summed: bool  # one update of their sum; else one update per gradient, in order


def next_group(
    mode: Mode,
    bound: int,
    version: int,
    slots: Sequence[SlotView],
    remote_ready: bool = False,
) -> Group | None:
    """The next update(s); None when the server must wait."""
    ready = sorted((s for s in slots if s.ready), key=lambda s: (s.read_version, s.index))
    if mode is Mode.BOUNDED:
        if ready:
            return Group([s.index for s in ready], False, False)
        return Group([], True, False) if remote_ready else None
    due = [s for s in slots if s.in_flight and version - s.read_version >= bound]
    if due:
        if all(s.ready for s in due):
            return Group([s.index for s in ready], remote_ready, True)
        return None
    if ready:
        return Group(_within_bound(bound, version, ready, slots), False, False)
    return Group([], True, False) if remote_ready else None


def _within_bound(
    bound: int, version: int, ready: Sequence[SlotView], slots: Sequence[SlotView]
) -> list[int]:
    """The longest run of the oldest ready gradients that can be applied one after another
    with each landing within the bound, and every learner left out (still computing, or
    ready and next in line) no further than the bound after the run; at least the oldest."""
    computing = [s for s in slots if s.in_flight and not s.ready]
    room = min((bound - (version - s.read_version) for s in computing), default=len(ready))
    ages = [version - s.read_version for s in ready]
    length = 1
    for k in range(2, min(room, len(ready)) + 1):
        # the k-th lands k - 1 updates from now; the first one left out, k updates from now
        if ages[k - 1] + k - 1 > bound or (k < len(ready) and ages[k] + k > bound):
            break
        length = k
    return [s.index for s in ready[:length]]


def clock_floor(slots: Sequence[SlotView], peer_clocks: Sequence[int] = ()) -> int | None:
    """The slowest live clock (gradients drained) here and at the peers; None if none."""
    clocks = [s.drained for s in slots if s.alive] + list(peer_clocks)
    return min(clocks) if clocks else None


def may_release(mode: Mode, bound: int, slot: SlotView, floor: int | None) -> bool:
    """Whether a learner whose last gradient is applied may start its next step."""
    if slot.drained <= slot.released:
        return False
    if mode is not Mode.BOUNDED or floor is None:
        return True
    return slot.drained - floor <= bound
