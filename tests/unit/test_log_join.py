"""Joining the stored log with the live stream: every line once, gaps counted exactly."""

from __future__ import annotations

import pytest

from api.services.log_join import (
    LineTimes,
    Numbered,
    OrderKey,
    Position,
    decode_position,
    encode_position,
    gap_notice,
)


def batch(first: int, count: int, learner: int = 1, attempt: int = 0) -> Numbered[str]:
    return Numbered(
        learner, attempt, first, [f"l{learner}-{n}" for n in range(first, first + count)]
    )


def test_live_lines_already_read_from_the_stored_log_are_not_repeated() -> None:
    position = Position({1: 150})
    assert list(position.take(batch(1, 100)).items) == []
    taken = position.take(batch(101, 100))
    assert (taken.gap, taken.first, list(taken.items)[:1]) == (0, 151, ["l1-151"])
    assert len(taken.items) == 50
    assert position.of(1) == 200


def test_a_gap_is_counted_exactly_and_moves_the_position_past_it() -> None:
    position = Position()
    position.take(batch(1, 10))
    taken = position.take(batch(49_919, 5))
    assert taken.gap == 49_908
    assert taken.first == 49_919
    assert position.of(1) == 49_923
    assert "49,908 lines skipped" in gap_notice(taken.gap, live=True)


def test_learners_are_followed_each_on_its_own() -> None:
    position = Position()
    position.take(batch(1, 5, learner=1))
    assert position.take(batch(1, 3, learner=2)).gap == 0
    assert (position.of(1), position.of(2)) == (5, 3)


def test_a_new_attempt_is_followed_from_its_own_first_line() -> None:
    position = Position({1: 800})
    position.take(batch(1, 1000, attempt=0))  # streamed live, not all of it stored
    assert position.of(1) == 1000
    taken = position.take(batch(801, 10, attempt=1))
    assert (taken.gap, taken.first, len(taken.items)) == (0, 801, 10)
    assert list(position.take(batch(990, 5, attempt=0)).items) == []  # late, of an attempt gone


def test_a_later_attempt_already_in_the_stored_log_is_not_repeated() -> None:
    # the job ended: its stored log holds attempt 0 (lines 1-356) and attempt 1 (357-868),
    # and both attempts' batches are still in the live stream
    position = Position()
    position.stored_through(1, 868)
    assert list(position.take(batch(1, 356, attempt=0)).items) == []
    assert list(position.take(batch(357, 512, attempt=1)).items) == []
    taken = position.take(batch(869, 3, attempt=1))
    assert (taken.gap, taken.first, len(taken.items)) == (0, 869, 3)


def test_positions_round_trip_and_bad_ones_are_refused() -> None:
    position = Position({1: 12, 3: 4, 2: 0})
    assert encode_position(position) == "1:12,3:4"
    assert decode_position("1:12,3:4").delivered == {1: 12, 3: 4}
    assert decode_position("").delivered == {}
    for bad in ("0-0", "1:x", "1:2,", "1700000000000-0", "1:2:3"):
        with pytest.raises(ValueError, match="Last-Event-ID"):
            decode_position(bad)


# -- time order across learners -------------------------------------------------------------


def test_line_times_say_when_the_stream_sent_each_line_and_nothing_outside_it() -> None:
    times = LineTimes()
    times.add(101, 50, 10.0)
    times.add(151, 50, 12.0)
    assert [times.of(n) for n in (100, 101, 150, 151, 200, 201)] == [
        None,
        10.0,
        10.0,
        12.0,
        12.0,
        None,
    ]


def test_a_new_attempts_lines_replace_what_the_stream_said_of_their_numbers() -> None:
    times = LineTimes()
    times.add(1, 100, 10.0)  # attempt 0 streamed lines 1..100; its stored log ended at 60
    times.add(61, 10, 50.0)  # attempt 1 numbers its lines from 61
    assert [times.of(n) for n in (60, 61, 70, 71, 100)] == [10.0, 50.0, 50.0, None, None]


def test_a_line_without_a_time_sorts_right_after_the_learners_line_before_it() -> None:
    order = OrderKey(2)
    keys = [order.of(t) for t in (None, None, 5.0, None, 4.0, 7.0)]
    assert keys == [
        (float("-inf"), 2),
        (float("-inf"), 2),
        (5.0, 2),
        (5.0, 2),
        (5.0, 2),  # a clock that stepped back keeps the learner's own order
        (7.0, 2),
    ]
