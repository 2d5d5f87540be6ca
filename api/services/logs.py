"""Reading a job's logs and metrics: the stored objects first, then the live tail.

A learner's stored log (`jobs/{id}/logs/learner-{n}.log`) holds its lines from the first;
the runner stores it every 10 s and when the learner ends. The live stream holds recent
batches of numbered lines. A reader streams the stored log, then the stream's lines beyond
it (`api.services.log_join`), so it gets every line once, the whole log once the job has
ended, and an exact notice where lines are missing. Nothing is read whole into memory.
Metrics are read the same way from `jobs/{id}/metrics/learner-{n}.jsonl` and their stream.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from anyio import to_thread

from api.errors import DlaasError
from api.follow_slots import holding, take_slot
from api.pagination import MetricPosition
from api.services.log_join import (
    LineTimes,
    Numbered,
    OrderKey,
    Position,
    Taken,
    encode_position,
    gap_notice,
)
from api.state import ApiState
from storage import jobs as repo
from storage import output_keys, streams
from storage.job_states import STOPPED_STATES, JobState
from storage.models import Job
from storage.object_store import ObjectNotFound, ObjectStore

_BLOCK_MS = 1000
_READ_ENTRIES = 64
_STATE_CHECK_S = 0.5
_CHUNK_BYTES = 1 << 20


async def _stored_chunks(objects: ObjectStore, key: str, start: int) -> AsyncIterator[bytes]:
    """A stored object's bytes from `start` on, each chunk read in a worker thread; nothing
    for an object that is not there (or goes while it is read)."""

    def open_chunks() -> Iterator[bytes]:
        try:
            return iter(objects.iter_chunks(key, _CHUNK_BYTES, start))
        except ObjectNotFound:
            return iter(())

    def next_chunk(chunks: Iterator[bytes]) -> bytes | None:
        try:
            return next(chunks, None)
        except ObjectNotFound:
            return None

    chunks = await to_thread.run_sync(open_chunks)
    while (chunk := await to_thread.run_sync(next_chunk, chunks)) is not None:
        yield chunk


async def _stored_lines(
    objects: ObjectStore, key: str, after: int
) -> AsyncIterator[tuple[int, list[str]]]:
    """The lines of a stored object after line `after`, in pieces: (number of the first,
    lines)."""
    chunks = _stored_chunks(objects, key, 0)
    number = 0
    rest = b""
    while True:
        chunk = await anext(chunks, None)
        if chunk is None:
            if not rest:
                return
            chunk, rest = rest + b"\n", b""
        data = rest + chunk
        cut = data.rfind(b"\n") + 1
        rest = data[cut:]
        count = data.count(b"\n", 0, cut)
        if number + count > after:
            lines = data[:cut].decode("utf-8", errors="replace").split("\n")[:-1]
            skip = max(0, after - number)
            yield number + skip + 1, lines[skip:]
        number += count


async def _job_state(state: ApiState, job_id: str) -> JobState | None:
    async with state.sessions() as session:
        job = await repo.get_job_any(session, job_id)
    return None if job is None else JobState(job.state)


def _sse(data: dict[str, Any], event_id: str | None = None, event: str | None = None) -> bytes:
    head = ""
    if event_id:
        head += f"id: {event_id}\n"
    if event:
        head += f"event: {event}\n"
    return head.encode() + b"data: " + orjson.dumps(data) + b"\n\n"


def _line_events(
    position: Position, learner: int, first: int, lines: Sequence[str], when: float | None
) -> list[bytes]:
    """One event per line, `{"learner", "line", "time"}`, whose id is the position after it.
    Only the learner's own number changes from line to line: the rest of each event is
    built once (a flood is a million of them)."""
    if not lines:
        return []
    position.moved_to(learner, 0)
    before, _, after = encode_position(position, marked=learner).partition("*")
    position.moved_to(learner, first + len(lines) - 1)
    head = f"id: {before}".encode()
    middle = f'{after}\ndata: {{"learner":{learner},"line":'.encode()
    tail = b',"time":' + orjson.dumps(when) + b"}\n\n"
    dumps = orjson.dumps
    return [
        head + str(number).encode() + middle + dumps(line) + tail
        for number, line in enumerate(lines, first)
    ]


def _taken_events(position: Position, taken: Taken[str], when: float) -> list[bytes]:
    events = []
    if taken.gap:
        notice = gap_notice(taken.gap, live=True)
        data = {"learner": taken.learner, "line": notice, "time": when, "gap": taken.gap}
        events.append(_sse(data, encode_position(position) if not taken.items else None))
    events.extend(_line_events(position, taken.learner, taken.first, taken.items, when))
    return events


def _log_batch(batch: streams.LogBatch) -> Numbered[str]:
    return Numbered(batch.learner, batch.attempt, batch.first, batch.lines)


async def follow_events(
    state: ApiState,
    job_id: str,
    learners: Sequence[int],
    position: Position,
    alive: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[bytes]:
    """Server-Sent Events of the job's log lines from `position`: the stored log, then the
    live stream, until the job stops (final, or HALTED) and its lines are drained, then any
    stored lines beyond the last one delivered; the `end` event names the state it stopped
    in. Every line's event id is the position after it. `alive` is called at least once a
    second while the live stream is followed."""
    for learner in learners:
        key = output_keys.log_key(job_id, learner)
        async for first, lines in _stored_lines(state.objects, key, position.of(learner)):
            yield b"".join(_line_events(position, learner, first, lines, None))
            position.stored_through(learner, first + len(lines) - 1)
    after: streams.StreamId = "0-0"
    last_state_check = 0.0
    wanted = set(learners)
    draining = False
    final_state = JobState.DELETED
    while True:
        if alive is not None:
            await alive()
        entries = await streams.aread_logs(
            state.redis,
            job_id,
            after,
            block_ms=None if draining else _BLOCK_MS,
            count=_READ_ENTRIES,
        )
        events: list[bytes] = []
        for entry_id, batch in entries:
            after = entry_id
            if batch.learner in wanted:
                taken = position.take(_log_batch(batch))
                events.extend(_taken_events(position, taken, batch.time))
        if events:
            yield b"".join(events)
        if len(entries) >= _READ_ENTRIES:
            continue
        if draining:
            # Lines the live view missed at the very end are in the stored log by now.
            for learner in learners:
                key = output_keys.log_key(job_id, learner)
                async for first, lines in _stored_lines(state.objects, key, position.of(learner)):
                    yield b"".join(_line_events(position, learner, first, lines, None))
                    position.stored_through(learner, first + len(lines) - 1)
            yield _sse({"state": str(final_state)}, event="end")
            return
        now = time.monotonic()
        if now - last_state_check < _STATE_CHECK_S:
            continue
        last_state_check = now
        job_state = await _job_state(state, job_id)
        if job_state is None or job_state in STOPPED_STATES:
            # Lines written before the final state are in the stream already: drain them.
            final_state = job_state or JobState.DELETED
            draining = True


async def followed(
    state: ApiState, user_id: int, job_id: str, learners: Sequence[int], position: Position
) -> AsyncIterator[bytes]:
    """`follow_events` holding one of the user's follow slots (`api.follow_slots`) while it
    streams; refused (429) when they hold as many as they may."""
    slot = await take_slot(state.redis, user_id, state.settings.max_follows_per_user)
    if slot is None:
        raise DlaasError(
            f"you already follow {state.settings.max_follows_per_user} logs at once, the "
            "most a user may: end one of them, or read this log without follow",
            code="too_many_follows",
            field="follow",
            status=429,
        )
    return holding(slot, follow_events(state, job_id, learners, position, slot.keep_alive))


def most_learners(job: Job) -> int:
    """The most learners the job may have run with: an elastic job resized down keeps the
    logs and metrics its other learners wrote."""
    elastic = job.manifest.get("elastic") if isinstance(job.manifest, dict) else None
    most = elastic.get("max_learners") if isinstance(elastic, dict) else None
    return max(job.learners, int(most or 0))


async def log_text(state: ApiState, job_id: str, learners: Sequence[int]) -> AsyncIterator[bytes]:
    """The job's log as text: each learner's stored log, then the lines of the live stream
    beyond it; several learners' lines in time order (`api.services.log_join`)."""
    if len(learners) == 1:
        learner = learners[0]
        position = Position()
        key = output_keys.log_key(job_id, learner)
        async for first, lines in _stored_lines(state.objects, key, 0):
            position.stored_through(learner, first + len(lines) - 1)
            yield "".join(line + "\n" for line in lines).encode()
        async for taken in _live_taken(state, job_id, learner, position):
            text = gap_notice(taken.gap, live=False) + "\n" if taken.gap else ""
            yield (text + "".join(line + "\n" for line in taken.items)).encode()
        return
    async for merged in lines_in_time_order(state, job_id, learners):
        yield "".join(line.text + "\n" for line in merged).encode()


async def log_line_events(
    state: ApiState, job_id: str, learners: Sequence[int]
) -> AsyncIterator[bytes]:
    """The same lines in the same order as `log_text`, as Server-Sent Events that say whose
    each line is: `{"learner", "line", "time"}` (the time the live stream knows for it, else
    null), and `"gap"` on a notice of lines missing. No `end` event: the log so far."""
    dumps = orjson.dumps
    async for lines in lines_in_time_order(state, job_id, learners):
        events = []
        for line in lines:
            data: dict[str, Any] = {"learner": line.learner, "line": line.text, "time": line.time}
            if line.gap:
                data["gap"] = line.gap
            events.append(b"data: " + dumps(data) + b"\n\n")
        yield b"".join(events)


@dataclass(frozen=True)
class MergedLine:
    """One line of a job's log, whose it is, when it was sent (None: unknown) and the key it
    is merged by; `gap` on a notice of that many lines missing."""

    key: tuple[float, int]
    learner: int
    time: float | None
    text: str
    gap: int = 0


async def _line_times(state: ApiState, job_id: str) -> dict[int, LineTimes]:
    """What the live stream says about when each learner's lines were sent (a few thousand
    spans at most: the stream is capped)."""
    times: dict[int, LineTimes] = {}
    after: streams.StreamId = "0-0"
    while True:
        logs = await streams.aread_logs(state.redis, job_id, after, count=_READ_ENTRIES)
        for _entry_id, batch in logs:
            spans = times.setdefault(batch.learner, LineTimes())
            spans.add(batch.first, len(batch.lines), batch.time)
        if len(logs) < _READ_ENTRIES:
            return times
        after = logs[-1][0]


async def _learner_lines(
    state: ApiState, job_id: str, learner: int, times: LineTimes
) -> AsyncIterator[list[MergedLine]]:
    """One learner's stored log, then the live lines beyond it, each with its time (when the
    stream knows it) and its sort key."""
    order = OrderKey(learner)
    position = Position()
    key = output_keys.log_key(job_id, learner)
    async for first, lines in _stored_lines(state.objects, key, 0):
        position.stored_through(learner, first + len(lines) - 1)
        yield [_line(order, times.of(n), text) for n, text in enumerate(lines, first)]
    async for taken in _live_taken(state, job_id, learner, position):
        out = []
        if taken.gap:
            notice = gap_notice(taken.gap, live=False)
            out.append(_line(order, times.of(taken.first), notice, taken.gap))
        out.extend(
            _line(order, times.of(n), text) for n, text in enumerate(taken.items, taken.first)
        )
        yield out


def _line(order: OrderKey, time: float | None, text: str, gap: int = 0) -> MergedLine:
    return MergedLine(order.of(time), order.learner, time, text, gap)


async def lines_in_time_order(
    state: ApiState, job_id: str, learners: Sequence[int]
) -> AsyncIterator[list[MergedLine]]:
    """The learners' lines merged by sort key: each learner's read a piece at a time, never
    the whole log."""
    times = await _line_times(state, job_id)
    sources = {n: _learner_lines(state, job_id, n, times.get(n, LineTimes())) for n in learners}
    heads: dict[int, deque[MergedLine]] = {}

    async def refill(learner: int) -> None:
        while not heads.get(learner):
            piece = await anext(sources[learner], None)
            if piece is None:
                heads.pop(learner, None)
                return
            heads[learner] = deque(piece)

    for learner in learners:
        await refill(learner)
    while heads:
        learner = min(heads, key=lambda n: heads[n][0].key)
        queue = heads[learner]
        others = [heads[n][0].key for n in heads if n != learner]
        bound = min(others) if others else None
        out = []
        while queue and (bound is None or queue[0].key < bound):
            out.append(queue.popleft())
        yield out
        if not queue:
            await refill(learner)


async def _live_taken(
    state: ApiState, job_id: str, learner: int, position: Position, metrics: bool = False
) -> AsyncIterator[Taken[str]]:
    """What the live log (or metrics) stream adds for one learner beyond `position`."""
    after: streams.StreamId = "0-0"
    while True:
        batches: list[Numbered[str]] = []
        if metrics:
            points = await streams.aread_metrics(state.redis, job_id, after, count=_READ_ENTRIES)
            after = points[-1][0] if points else after
            batches = [Numbered(m.learner, m.attempt, m.first, m.points) for _, m in points]
        else:
            logs = await streams.aread_logs(state.redis, job_id, after, count=_READ_ENTRIES)
            after = logs[-1][0] if logs else after
            batches = [_log_batch(batch) for _, batch in logs]
        for numbered in batches:
            if numbered.learner == learner:
                taken = position.take(numbered)
                if taken.gap or taken.items:
                    yield taken
        if len(batches) < _READ_ENTRIES:
            return


def _point(line: str, learner: int) -> bytes:
    record = streams.decode_metric_line(line, learner)
    return orjson.dumps(
        {"learner": learner, "time": record.time, "step": record.step, "values": record.values}
    )


async def metric_points_json(
    state: ApiState, job_id: str, learners: Sequence[int]
) -> AsyncIterator[bytes]:
    """`{"metrics": [...]}` learner after learner: the stored points, then the live ones
    beyond them. A point whose line is damaged keeps what can be read of it."""
    yield b'{"metrics":['
    separator = b""
    for learner in learners:
        position = Position()
        key = output_keys.metrics_key(job_id, learner)
        async for first, lines in _stored_lines(state.objects, key, 0):
            position.stored_through(learner, first + len(lines) - 1)
            points = [_point(line, learner) for line in lines if line.strip()]
            if points:
                yield separator + b",".join(points)
                separator = b","
        async for taken in _live_taken(state, job_id, learner, position, metrics=True):
            points = [_point(line, learner) for line in taken.items]
            if points:
                yield separator + b",".join(points)
                separator = b","
    yield b"]}"


_TAIL_BYTES = 256 << 10
_TAIL_ENTRIES = 16


async def latest_points(
    state: ApiState, job_id: str, learners: Sequence[int], count: int
) -> AsyncIterator[bytes]:
    """`{"metrics": [...]}` with at most the last `count` points of each learner: from the
    newest live batches, else from the end of the stored points. Cheap however long the job
    has run, for a status line that polls."""
    yield b'{"metrics":['
    separator = b""
    entries = await streams.aread_metrics_newest(state.redis, job_id, _TAIL_ENTRIES)
    for learner in learners:
        lines: list[str] = []
        for _entry_id, batch in entries:  # newest first
            if batch.learner == learner and len(lines) < count:
                lines = list(batch.points[-(count - len(lines)) :]) + lines
        if not lines:
            lines = await to_thread.run_sync(_stored_tail, state.objects, job_id, learner, count)
        points = [_point(line, learner) for line in lines if line.strip()]
        if points:
            yield separator + b",".join(points)
            separator = b","
    yield b"]}"


def _stored_tail(objects: ObjectStore, job_id: str, learner: int, count: int) -> list[str]:
    key = output_keys.metrics_key(job_id, learner)
    try:
        size = objects.size(key)
        data = b"".join(objects.iter_chunks(key, _CHUNK_BYTES, max(0, size - _TAIL_BYTES)))
    except ObjectNotFound:
        return []
    lines = data.decode("utf-8", errors="replace").splitlines()
    if size > _TAIL_BYTES:
        lines = lines[1:]  # the first may be cut
    return lines[-count:]


async def metric_page(
    state: ApiState, job_id: str, learners: Sequence[int], limit: int, start: MetricPosition
) -> tuple[list[bytes], MetricPosition | None]:
    """At most `limit` points from `start` on, learner after learner (each one's stored
    points, then the live ones beyond them), and where the next page starts (None: no more).
    A stored object is read from the byte the page before ended at, however deep the page."""
    points: list[bytes] = []
    for learner in [n for n in learners if n >= start.learner]:
        at = start if learner == start.learner else MetricPosition(learner)
        offset, number = at.offset, at.points_before
        key = output_keys.metrics_key(job_id, learner)
        async for line, end in _stored_lines_from(state.objects, key, offset):
            offset, number = end, number + 1
            if number <= at.served:
                continue
            if line.strip():
                points.append(_point(line, learner))
            if len(points) == limit:
                return points, MetricPosition(learner, offset, number, number)
        position = Position()
        position.moved_to(learner, max(number, at.served))
        async for taken in _live_taken(state, job_id, learner, position, metrics=True):
            for index, line in enumerate(taken.items):
                points.append(_point(line, learner))
                if len(points) == limit:
                    return points, MetricPosition(learner, offset, number, taken.first + index)
    return points, None


async def _stored_lines_from(
    objects: ObjectStore, key: str, start: int
) -> AsyncIterator[tuple[str, int]]:
    """The whole lines of a stored object from byte `start` on, each with the byte after it."""
    offset, rest = start, b""
    async for chunk in _stored_chunks(objects, key, start):
        data = rest + chunk
        cut = data.rfind(b"\n") + 1
        rest = data[cut:]
        for raw in data[:cut].split(b"\n")[:-1]:
            offset += len(raw) + 1
            yield raw.decode("utf-8", errors="replace"), offset
