"""Joining a job's stored log (or metrics) with its live stream, line by line.

Each learner's lines are numbered from 1 in its stored log, across attempts, and the live
stream carries batches that say the number of their first line (`storage.streams`). A reader
keeps, per learner, the number of the last line it delivered (`Position`): the stored part
moves it, and of a live batch it delivers only the lines beyond it. A batch that starts
further on than the next line is a gap (the runner skipped ahead, or the stream was trimmed
before the reader got there), announced with its exact size. A new attempt numbers its lines
from its own stored log, which may end before what an earlier attempt streamed live: the
reader then follows the new attempt from its first line.

The same `Position` names where a follower is (`encode_position`), so a reconnecting client
resumes exactly where it stopped. Plain functions over plain data: no I/O here.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")

POSITION = re.compile(r"^(?:[0-9]{1,6}:[0-9]{1,15}(?:,[0-9]{1,6}:[0-9]{1,15})*)?$")


@dataclass(frozen=True)
class Numbered(Generic[T]):
    """Consecutive items (lines or metric points) of one learner: `items[0]` is number
    `first`."""

    learner: int
    attempt: int
    first: int
    items: Sequence[T]


@dataclass
class Taken(Generic[T]):
    """What a batch adds for a reader: `gap` items it will never see live, then `items`
    numbered from `first`."""

    learner: int
    gap: int
    first: int
    items: Sequence[T]


@dataclass
class Position:
    """Per learner, the number of the last item delivered (or announced as skipped)."""

    delivered: dict[int, int] = field(default_factory=dict)
    attempts: dict[int, int] = field(default_factory=dict)
    # the last line read from the stored log: stored lines are never numbered again, so a
    # new attempt's live lines at or below it were delivered from there already
    stored: dict[int, int] = field(default_factory=dict)

    def of(self, learner: int) -> int:
        return self.delivered.get(learner, 0)

    def moved_to(self, learner: int, number: int) -> None:
        self.delivered[learner] = number

    def stored_through(self, learner: int, number: int) -> None:
        """Items up to `number` were delivered from the learner's stored log."""
        self.delivered[learner] = number
        self.stored[learner] = max(self.stored.get(learner, 0), number)

    def take(self, batch: Numbered[T]) -> Taken[T]:
        """The part of `batch` this reader has not had, and the gap before it."""
        learner = batch.learner
        seen_attempt = self.attempts.get(learner)
        last = self.of(learner)
        if seen_attempt is not None and batch.attempt < seen_attempt:
            return Taken(learner, 0, batch.first, ())  # a late batch of an attempt gone by
        if seen_attempt is not None and batch.attempt > seen_attempt:
            last = max(min(last, batch.first - 1), self.stored.get(learner, 0))
        self.attempts[learner] = batch.attempt
        gap = max(0, batch.first - last - 1)
        skip = max(0, last - batch.first + 1)
        items = batch.items[skip:]
        first = batch.first + skip
        if items or gap:
            self.delivered[learner] = first + len(items) - 1
        return Taken(learner, gap, first, items)


def encode_position(position: Position, marked: int | None = None) -> str:
    """`learner:last,learner:last` (learners with nothing delivered left out); with `marked`,
    that learner's number is `*`, for a caller that fills it in line by line."""
    return ",".join(
        f"{learner}:{'*' if learner == marked else n}"
        for learner, n in sorted(position.delivered.items())
        if n or learner == marked
    )


def decode_position(text: str) -> Position:
    """The position a client names; ValueError when the text is not one."""
    text = text.strip()
    if not POSITION.match(text):
        raise ValueError(
            "Last-Event-ID must be the id of an event of this stream (learner:line,...)"
        )
    delivered: dict[int, int] = {}
    for part in filter(None, text.split(",")):
        learner, number = part.split(":")
        delivered[int(learner)] = int(number)
    return Position(delivered)


def gap_notice(count: int, live: bool) -> str:
    if live:
        return f"[dlaas] {count:,} lines skipped in the live view; `dlaas logs` has them"
    return (
        f"[dlaas] {count:,} lines are not stored yet and no longer live; "
        "the log is stored every 10 s and when the learner ends"
    )


# -- time order across learners -----------------------------------------------------------
#
# A stored log holds bare lines: no time. The live stream's batches carry the time they were
# sent, so a line whose number a batch of the stream still covers has that time (the stream
# keeps the last ~2,000 batches of the job, and for an hour once it ended). The job's log is
# put in time order by one rule: each learner's lines keep their own order; a line with a
# time sorts by it; a line without one sorts right after the learner's last line before it
# (so the lines before the stream's window open the log, learner by learner, and a log whose
# stream has gone reads learner after learner); lines of equal time go learner by learner.


@dataclass(frozen=True)
class Span:
    """Lines `first`..`last` of a learner were sent live at `time`."""

    first: int
    last: int
    time: float


@dataclass
class LineTimes:
    """The times the live stream knows for one learner's line numbers. A new attempt numbers
    its lines again from its stored log: its spans replace what an earlier attempt's said
    about the same numbers."""

    spans: list[Span] = field(default_factory=list)
    _hint: int = 0  # lines are looked up in rising order: the span the last one was in

    def add(self, first: int, count: int, time: float) -> None:
        if count <= 0:
            return
        last = first + count - 1
        while self.spans and self.spans[-1].last >= first:
            old = self.spans.pop()
            if old.first < first:
                self.spans.append(Span(old.first, first - 1, old.time))
                break
        self.spans.append(Span(first, last, time))

    def of(self, number: int) -> float | None:
        hint = self._hint
        if hint < len(self.spans) and self.spans[hint].first <= number <= self.spans[hint].last:
            return self.spans[hint].time
        index = bisect.bisect_right(self.spans, number, key=lambda span: span.first) - 1
        if index >= 0 and self.spans[index].last >= number:
            self._hint = index
            return self.spans[index].time
        return None


@dataclass
class OrderKey:
    """Sort keys for one learner's lines, in its order: never less than the key before."""

    learner: int
    last: float = float("-inf")

    def of(self, time: float | None) -> tuple[float, int]:
        if time is not None and time > self.last:
            self.last = time
        return (self.last, self.learner)
