"""Reading a job's logs and metrics: the Redis stream while it lives, stored files after."""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from anyio import to_thread

from api.schemas import MetricPoint
from api.state import ApiState
from storage import jobs as repo
from storage import streams
from storage.job_states import STOPPED_STATES, JobState
from storage.object_store import ObjectStore

_LEARNER_FILE = re.compile(r"learner-(\d+)\.(log|jsonl)$")
_BLOCK_MS = 1000
_BATCH = 500


def _stored_files(objects: ObjectStore, prefix: str) -> list[tuple[int, str]]:
    found = []
    for info in objects.list(prefix):
        match = _LEARNER_FILE.search(info.key)
        if match:
            found.append((int(match.group(1)), info.key))
    return sorted(found)


def _stored_lines(objects: ObjectStore, job_id: str, learner: int | None) -> list[tuple[int, str]]:
    lines: list[tuple[int, str]] = []
    for index, key in _stored_files(objects, f"jobs/{job_id}/logs/"):
        if learner is None or learner == index:
            text = objects.get_bytes(key).decode("utf-8", "replace")
            lines.extend((index, line) for line in text.splitlines())
    return lines


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


async def all_lines_text(state: ApiState, job_id: str, learner: int | None) -> str:
    entries = await streams.aread_logs(state.redis, job_id, count=1_000_000)
    if entries:
        chosen = [line.line for _, line in entries if learner is None or line.learner == learner]
    else:
        stored = await to_thread.run_sync(_stored_lines, state.objects, job_id, learner)
        chosen = [line for _, line in stored]
    return "\n".join(chosen) + ("\n" if chosen else "")


def _events_of(
    entries: list[tuple[str, streams.LogLine]], after: str, learner: int | None
) -> tuple[str, list[bytes]]:
    """SSE events for stream entries, and the id to continue after."""
    events: list[bytes] = []
    for entry_id, line in entries:
        after = entry_id
        if learner is None or line.learner == learner:
            data = {"learner": line.learner, "line": line.line, "time": line.time}
            events.append(_sse(data, after))
    return after, events


async def follow_events(
    state: ApiState, job_id: str, after: str, learner: int | None
) -> AsyncIterator[bytes]:
    """Server-Sent Events of the job's log lines until the job stops (final, or HALTED)
    and its lines are drained; the `end` event names the state it stopped in."""
    key = streams.logs_key(job_id)
    if after == "0-0" and not await state.redis.exists(key):
        job_state = await _job_state(state, job_id)
        if job_state in STOPPED_STATES:
            stored = await to_thread.run_sync(_stored_lines, state.objects, job_id, learner)
            for index, line in stored:
                yield _sse({"learner": index, "line": line, "time": None})
            yield _sse({"state": str(job_state)}, event="end")
            return
    last_state_check = 0.0
    while True:
        entries = await streams.aread_logs(
            state.redis, job_id, after, block_ms=_BLOCK_MS, count=_BATCH
        )
        after, events = _events_of(entries, after, learner)
        if events:
            yield b"".join(events)
            if len(events) >= _BATCH:
                continue
        now = time.monotonic()
        if now - last_state_check < 0.5:
            continue
        last_state_check = now
        job_state = await _job_state(state, job_id)
        if job_state is None or job_state in STOPPED_STATES:
            # Lines written just before the final state are in the stream already: drain them.
            tail = await streams.aread_logs(state.redis, job_id, after, count=1_000_000)
            after, events = _events_of(tail, after, learner)
            if events:
                yield b"".join(events)
            yield _sse({"state": str(job_state or JobState.DELETED)}, event="end")
            return


def _stored_metrics(objects: ObjectStore, job_id: str) -> list[MetricPoint]:
    points = []
    for index, key in _stored_files(objects, f"jobs/{job_id}/metrics/"):
        for raw in objects.get_bytes(key).splitlines():
            if raw.strip():
                record = json.loads(raw)
                points.append(
                    MetricPoint(
                        learner=index,
                        time=float(record.get("time", 0.0)),
                        step=record.get("step"),
                        values=record.get("values", {}),
                    )
                )
    return points


async def metric_points(state: ApiState, job_id: str) -> list[MetricPoint]:
    entries = await streams.aread_metrics(state.redis, job_id, count=1_000_000)
    if not entries:
        return await to_thread.run_sync(_stored_metrics, state.objects, job_id)
    points = []
    for _, record in entries:
        points.append(
            MetricPoint(
                learner=record.learner, time=record.time, step=record.step, values=record.values
            )
        )
    return points
