"""The parameter server's decisions, on made-up slot states and in a random simulation."""

from __future__ import annotations

import random

import pytest

from learner_image.ps.layout import Mode
from learner_image.ps.policy import Group, SlotView, clock_floor, may_release, next_group


def slot(
    i: int, *, committed: int, drained: int, released: int, read: int = 0, alive: bool = True
) -> SlotView:
    return SlotView(i, alive, committed, drained, released, read)


def test_async_applies_ready_gradients_oldest_first_each_an_update_of_its_own() -> None:
    slots = [
        slot(0, committed=1, drained=0, released=0, read=3),
        slot(1, committed=1, drained=0, released=0, read=1),
    ]
    assert next_group(Mode.ASYNC, 8, 4, slots) == Group([1, 0], False, False)


def test_async_applies_no_more_in_a_row_than_the_bound_allows() -> None:
    computing = slot(2, committed=0, drained=0, released=0, read=3)  # age 1 of 3
    ready = [slot(i, committed=1, drained=0, released=0, read=4) for i in range(2)]
    assert next_group(Mode.ASYNC, 3, 4, [*ready, computing]) == Group([0, 1], False, False)
    computing = slot(2, committed=0, drained=0, released=0, read=2)  # age 2 of 3
    assert next_group(Mode.ASYNC, 3, 4, [*ready, computing]) == Group([0], False, False)
    # three of age 2 of 3: the third would land two updates later, and left out of a run
    # of two it would wait as long; after one alone, the other two are due together
    old = [slot(i, committed=1, drained=0, released=0, read=2) for i in range(3)]
    assert next_group(Mode.ASYNC, 3, 4, old) == Group([0], False, False)
    assert next_group(Mode.ASYNC, 3, 4, old[:2]) == Group([0, 1], False, False)


def test_a_learner_at_the_bound_must_be_in_the_next_update() -> None:
    computing = slot(0, committed=0, drained=0, released=0, read=0)
    ready = slot(1, committed=1, drained=0, released=0, read=2)
    assert next_group(Mode.ASYNC, 2, 2, [computing, ready]) is None  # wait for slot 0
    both = [slot(0, committed=1, drained=0, released=0, read=0), ready]
    assert next_group(Mode.ASYNC, 2, 2, both, remote_ready=True) == Group([0, 1], True, True)


def test_a_dead_learner_is_not_waited_for_but_its_gradient_is_applied() -> None:
    dead = slot(0, committed=3, drained=2, released=2, alive=False)
    computing_dead = slot(1, committed=0, drained=0, released=0, alive=False)
    assert next_group(Mode.SYNC, 0, 5, [dead, computing_dead]) == Group([0], False, False)


def test_sync_waits_for_every_live_learner_then_applies_them_together() -> None:
    slots = [
        slot(0, committed=1, drained=0, released=0, read=5),
        slot(1, committed=0, drained=0, released=0, read=5),
    ]
    assert next_group(Mode.SYNC, 0, 5, slots) is None
    slots[1] = slot(1, committed=1, drained=0, released=0, read=5)
    assert next_group(Mode.SYNC, 0, 5, slots) == Group([0, 1], False, True)


def test_bounded_holds_a_learner_too_far_ahead_of_the_slowest() -> None:
    fast = slot(0, committed=5, drained=5, released=4)
    slow = slot(1, committed=2, drained=2, released=2)
    floor = clock_floor([fast, slow])
    assert floor == 2
    assert not may_release(Mode.BOUNDED, 2, fast, floor)
    assert may_release(Mode.BOUNDED, 3, fast, floor)
    assert may_release(Mode.BOUNDED, 2, fast, clock_floor([fast, slow], [3]) and 3)
    assert clock_floor([fast, slot(1, committed=0, drained=0, released=0, alive=False)]) == 5


@pytest.mark.parametrize(
    ("mode", "bound"),
    [(Mode.ASYNC, 0), (Mode.ASYNC, 3), (Mode.SYNC, 0), (Mode.BOUNDED, 0), (Mode.BOUNDED, 2)],
)
def test_random_runs_never_deadlock_and_keep_the_bound(mode: Mode, bound: int) -> None:
    """Learners finish computing in random order; the server must always be able to move,
    and no applied gradient may exceed the bound."""
    rng = random.Random(bound * 7 + len(mode.value))
    n = 4
    committed, drained, released, read = [0] * n, [0] * n, [0] * n, [0] * n
    version = applied = 0
    while applied < 2000:
        views = [
            slot(i, committed=committed[i], drained=drained[i], released=released[i], read=read[i])
            for i in range(n)
        ]
        computing = [i for i in range(n) if committed[i] == released[i]]
        decision = next_group(mode, bound, version, views)
        if decision is None:
            assert computing, "the server waits while no learner computes: deadlock"
        if decision is None or (computing and rng.random() < 0.5):
            i = rng.choice(computing)
            committed[i] += 1
        else:
            for position, i in enumerate(decision.slots):
                at = version if decision.summed else version + position
                if mode is not Mode.BOUNDED:
                    assert at - read[i] <= bound
                drained[i] = committed[i]
                applied += 1
            version += 1 if decision.summed else len(decision.slots)
        views = [
            slot(i, committed=committed[i], drained=drained[i], released=released[i], read=read[i])
            for i in range(n)
        ]
        floor = clock_floor(views)
        for v in views:
            if may_release(mode, bound, v, floor):
                assert floor is None or mode is not Mode.BOUNDED or v.drained - floor <= bound
                released[v.index], read[v.index] = v.drained, version
