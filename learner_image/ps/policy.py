"""Which gradients the server applies next and which learners it lets go on: pure decisions.

The server calls these on a snapshot of the slot words; the tests call them on made-up ones.

Staleness, as each mode bounds it:

- async and sync bound the *version staleness* of every gradient: how many updates were
  applied between the moment its learner was released (and so read the weights) and the
  moment the gradient is applied. Each in-flight learner has an age (updates since its
  release); one whose age has reached the bound must be in the very next update. So when
  any learner is at the bound, the server waits for all such learners' gradients and
  applies them together with whatever else is ready, as one update; otherwise it applies
  the oldest ready gradient alone (Downpour). Sync is the bound 0: every update is the sum
  of all learners' gradients. No wait is circular: the server only waits for learners that
  are computing, never for a ready gradient, and a learner that dies stops counting.
- bounded bounds the *clock gap* (stale-synchronous parallel): a learner's clock is the
  number of its gradients applied; it is released for its next step only while its clock
  is at most `bound` ahead of the slowest live learner's (here and, across sidecars, the
  clocks peers report). Gradients are applied as they arrive. The slowest learner is never
  held, so someone can always move.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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


def next_group(
    mode: Mode,
    bound: int,
    version: int,
    slots: Sequence[SlotView],
    remote_ready: bool = False,
) -> tuple[list[int], bool] | None:
    """The slots to apply as the next update and whether a pending remote update joins it;
    None when the server must wait."""
    ready = [s for s in slots if s.ready]
    if mode is Mode.BOUNDED:
        if ready:
            return [min(ready, key=lambda s: (s.read_version, s.index)).index], False
        return ([], True) if remote_ready else None
    due = [s for s in slots if s.in_flight and version - s.read_version >= bound]
    if due:
        if all(s.ready for s in due):
            return [s.index for s in ready], remote_ready
        return None
    if ready:
        return [min(ready, key=lambda s: (s.read_version, s.index)).index], False
    return ([], True) if remote_ready else None


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
