"""Redis streams that carry a job's live data: logs, metrics, learner events, heartbeats.

Keys:
    dlaas:job:{job_id}:logs         stream of line batches {"l": learner, "a": attempt,
                                    "s": number of the first line, "t": unix time,
                                    "lines": the lines joined by newlines}
    dlaas:job:{job_id}:metrics      stream of point batches {"l", "a", "s": number of the first
                                    point, "m": the points as lines of the metrics file}
    dlaas:job:{job_id}:heartbeats   hash   {learner: unix time}
    dlaas:job:{job_id}:events       stream of the job's learner events, as its runners send
                                    them (they reach only their own job's keys), relayed by
                                    the lifecycle manager into the shared stream below with
                                    `job` set from the key (`lifecycle_manager.glue.event_relay`)
    dlaas:learner-events            stream {"job", "learner", "attempt", "kind", "t", ...fields}
                                    read by the lifecycle manager through a consumer group
    dlaas:relayed-jobs              sorted set: the jobs whose event streams are relayed,
                                    scored 0 while their learners may report, then by the
                                    time their Redis user was revoked
    dlaas:relay-cursors             hash {job: id of the last event relayed}
    dlaas:relay-wake                stream: a job was added to the relayed set

Lines and points are numbered per learner as in the learner's stored log and metrics file
(`jobs/{id}/logs/learner-{n}.log`, `jobs/{id}/metrics/learner-{n}.jsonl`), 1-based and
continuing across attempts, so a reader joins the stored part and the live tail without
repeating or missing anything, and sees exactly how many lines a gap in the stream holds.

Clients come from `client`/`async_client`, which survive a Redis restart; the consumer
group helpers create the stream and group again when a restart lost them (`NOGROUP`). Key names and
record encoding are pure functions. Every I/O helper has a sync twin (for
`redis.Redis`) and an async twin named with an `a` prefix (for `redis.asyncio.Redis`); both
build their arguments and decode their answers with the same functions, so only the call to
Redis differs. Clients may use `decode_responses` or not: answers are decoded either way.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time as clock
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import orjson
from redis.exceptions import ResponseError

from storage.job_states import LEARNER_REPORTED

if TYPE_CHECKING:
    from redis import Redis
    from redis.asyncio import Redis as AsyncRedis

log = logging.getLogger(__name__)

LEARNER_EVENTS: Final = "dlaas:learner-events"
RELAYED_JOBS: Final = "dlaas:relayed-jobs"
RELAY_CURSORS: Final = "dlaas:relay-cursors"
RELAY_WAKE: Final = "dlaas:relay-wake"
# Each node agent's word on how it runs learners' programs: node name -> JSON
# {"isolated": bool, "why": str}; the API warns when a node runs every job as one user.
NODE_ISOLATION: Final = "dlaas:node-isolation"
# Entries are batches of lines of at most `BATCH_BYTES` in all (or one longer line), or of at
# most `METRIC_BATCH_POINTS` points, so a flood keeps a job's log stream under about 64 MB
# while a quiet program's stream still holds its last 2000 lines (readers take anything
# older from the stored log).
LOGS_MAXLEN: Final = 2_000
METRICS_MAXLEN: Final = 2_000
BATCH_BYTES: Final = 32 * 1024
METRIC_BATCH_POINTS: Final = 500
LEARNER_EVENTS_MAXLEN: Final = 100_000
JOB_EVENTS_MAXLEN: Final = 10_000
HEARTBEAT_TTL_SECONDS: Final = 24 * 3600
# How long a finished job's live streams stay in Redis; its stored log and metrics remain.
FINISHED_STREAMS_TTL_SECONDS: Final = 3600

STATUS: Final = "status"
EXIT: Final = "exit"
CHECKPOINT: Final = "checkpoint"
EVENT_KINDS: Final = frozenset({STATUS, EXIT, CHECKPOINT})

StreamId = str
"""A stream entry id such as '1700000000000-0'; '0-0' reads from the start."""


# -- key names -------------------------------------------------------------------------------


def logs_key(job_id: str) -> str:
    return f"dlaas:job:{job_id}:logs"


def metrics_key(job_id: str) -> str:
    return f"dlaas:job:{job_id}:metrics"


def heartbeats_key(job_id: str) -> str:
    return f"dlaas:job:{job_id}:heartbeats"


def events_key(job_id: str) -> str:
    return f"dlaas:job:{job_id}:events"


def job_keys(job_id: str) -> tuple[str, ...]:
    """Every key that holds data of one job (and all that its learners may touch)."""
    return logs_key(job_id), metrics_key(job_id), heartbeats_key(job_id), events_key(job_id)


# -- records -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogBatch:
    """Consecutive lines of one learner's log: `lines[0]` is line number `first`."""

    learner: int
    attempt: int
    first: int
    lines: tuple[str, ...]
    time: float


@dataclass(frozen=True)
class MetricRecord:
    learner: int
    time: float
    step: int | None
    values: dict[str, float]


@dataclass(frozen=True)
class MetricBatch:
    """Consecutive points of one learner's metrics: `points[0]` is point number `first`. A
    point is a line of the metrics file (`metric_line`), sent as the runner wrote it."""

    learner: int
    attempt: int
    first: int
    points: tuple[str, ...]

    def records(self) -> list[MetricRecord]:
        return [decode_metric_line(point, self.learner) for point in self.points]


def metric_line(learner: int, time: float, step: int | None, values: Mapping[str, float]) -> str:
    """A point as a line of the metrics file `jobs/{id}/metrics/learner-{n}.jsonl`:
    `{"learner": n, "time": t, "step": s|null, "values": {name: x}}`."""
    return orjson.dumps({"learner": learner, "time": time, "step": step, "values": values}).decode()


def decode_metric_line(line: str | bytes, learner: int = 0) -> MetricRecord:
    """A line of the metrics file; a damaged line decodes to what can be read."""
    try:
        raw = orjson.loads(line)
    except orjson.JSONDecodeError:
        raw = {}
    if not isinstance(raw, dict):
        raw = {}
    step, at = raw.get("step"), raw.get("time")
    return MetricRecord(
        learner=_int(str(raw.get("learner", learner)), learner),
        time=float(at) if isinstance(at, int | float) and not isinstance(at, bool) else 0.0,
        step=step if isinstance(step, int) and not isinstance(step, bool) else None,
        values=_values(raw.get("values")),
    )


@dataclass(frozen=True)
class LearnerEvent:
    """Something a learner's runner or the node agent reports about one learner attempt."""

    job: str
    learner: int
    attempt: int
    kind: str
    fields: dict[str, str] = field(default_factory=dict)
    time: float = 0.0


_EVENT_HEADER: Final = frozenset({"job", "learner", "attempt", "kind", "t"})


def status_event(
    job: str, learner: int, attempt: int, state: str, time: float | None = None
) -> LearnerEvent:
    if state not in LEARNER_REPORTED:
        known = ", ".join(sorted(LEARNER_REPORTED))
        raise ValueError(f"learner state {state!r} is not one of {known}")
    return LearnerEvent(job, learner, attempt, STATUS, {"state": state}, _now(time))


def exit_event(
    job: str,
    learner: int,
    attempt: int,
    exit_code: int | None,
    signal: str | None = None,
    reason: str = "",
    time: float | None = None,
) -> LearnerEvent:
    fields = {
        "exit_code": "" if exit_code is None else str(exit_code),
        "signal": signal or "",
        "reason": reason,
    }
    return LearnerEvent(job, learner, attempt, EXIT, fields, _now(time))


def checkpoint_event(
    job: str, learner: int, attempt: int, name: str, time: float | None = None
) -> LearnerEvent:
    return LearnerEvent(job, learner, attempt, CHECKPOINT, {"name": name}, _now(time))


def encode_log_batch(batch: LogBatch) -> dict[str, str]:
    return {
        "l": str(batch.learner),
        "a": str(batch.attempt),
        "s": str(batch.first),
        "t": repr(float(batch.time)),
        "lines": "\n".join(batch.lines),
    }


def decode_log_batch(fields: Mapping[Any, Any]) -> LogBatch:
    """Decode a log entry; a damaged entry decodes to what can be read, never raises."""
    text = _text_fields(fields)
    return LogBatch(
        learner=_int(text.get("l"), 0),
        attempt=_int(text.get("a"), 0),
        first=_int(text.get("s"), 1),
        lines=tuple(text.get("lines", "").split("\n")),
        time=_float(text.get("t")),
    )


def _values(raw: Any) -> dict[str, float]:
    if not isinstance(raw, dict):
        return {}
    return {
        str(name): float(x)
        for name, x in raw.items()
        if isinstance(x, int | float) and not isinstance(x, bool)
    }


def encode_metric_batch(batch: MetricBatch) -> dict[str, str]:
    return {
        "l": str(batch.learner),
        "a": str(batch.attempt),
        "s": str(batch.first),
        "m": "\n".join(batch.points),
    }


def decode_metric_batch(fields: Mapping[Any, Any]) -> MetricBatch:
    """Decode a metrics entry; damage never raises."""
    text = _text_fields(fields)
    points = text.get("m", "")
    return MetricBatch(
        learner=_int(text.get("l"), 0),
        attempt=_int(text.get("a"), 0),
        first=_int(text.get("s"), 1),
        points=tuple(points.split("\n")) if points else (),
    )


def encode_learner_event(event: LearnerEvent) -> dict[str, str]:
    clash = _EVENT_HEADER.intersection(event.fields)
    if clash:
        raise ValueError(f"event fields may not be named {sorted(clash)}; those are the header")
    if event.kind not in EVENT_KINDS:
        raise ValueError(f"event kind {event.kind!r} is not one of {sorted(EVENT_KINDS)}")
    header = {
        "job": event.job,
        "learner": str(event.learner),
        "attempt": str(event.attempt),
        "kind": event.kind,
        "t": repr(float(event.time)),
    }
    return header | event.fields


def decode_learner_event(fields: Mapping[Any, Any] | None) -> LearnerEvent:
    """Decode a learner event; raises ValueError if the entry is not one."""
    if fields is None:
        raise ValueError("the entry was deleted from the stream")
    text = _text_fields(fields)
    try:
        return LearnerEvent(
            job=text["job"],
            learner=int(text["learner"]),
            attempt=int(text["attempt"]),
            kind=text["kind"],
            fields={k: v for k, v in text.items() if k not in _EVENT_HEADER},
            time=_float(text.get("t")),
        )
    except (KeyError, ValueError) as exc:
        raise ValueError(f"not a learner event: {text!r}") from exc


# -- argument building and answer decoding shared by the sync and async helpers -----------------


def _xadd_kwargs(key: str, fields: dict[str, str], maxlen: int) -> dict[str, Any]:
    return {"name": key, "fields": fields, "maxlen": maxlen, "approximate": True}


def _xread_kwargs(key: str, after: StreamId, block_ms: int | None, count: int) -> dict[str, Any]:
    return {"streams": {key: after}, "count": count, "block": block_ms}


def _xreadgroup_kwargs(
    group: str, consumer: str, block_ms: int | None, count: int, pending: bool
) -> dict[str, Any]:
    return {
        "groupname": group,
        "consumername": consumer,
        "streams": {LEARNER_EVENTS: "0" if pending else ">"},
        "count": count,
        # Pending entries are already ours: never wait for them.
        "block": None if pending else block_ms,
    }


def _xautoclaim_kwargs(group: str, consumer: str, min_idle_ms: int, count: int) -> dict[str, Any]:
    return {
        "name": LEARNER_EVENTS,
        "groupname": group,
        "consumername": consumer,
        "min_idle_time": min_idle_ms,
        "start_id": "0-0",
        "count": count,
    }


def _heartbeat_kwargs(job_id: str, learner: int, time: float | None) -> dict[str, Any]:
    return {"name": heartbeats_key(job_id), "key": str(learner), "value": repr(_now(time))}


def streams_of(answer: Any) -> list[tuple[Any, list[Any]]]:
    """(key, entries) of each stream in an XREAD/XREADGROUP answer (RESP2 list or RESP3 map)."""
    if not answer:
        return []
    return list(answer.items() if isinstance(answer, Mapping) else answer)


def _stream_entries(answer: Any) -> list[tuple[StreamId, Mapping[Any, Any] | None]]:
    """Entries of an XREAD/XREADGROUP answer for one stream."""
    entries: list[tuple[StreamId, Mapping[Any, Any] | None]] = []
    for _key, items in streams_of(answer):
        entries.extend((as_text(entry_id), fields) for entry_id, fields in items)
    return entries


def _claimed_entries(answer: Any) -> list[tuple[StreamId, Mapping[Any, Any] | None]]:
    """Entries of an XAUTOCLAIM answer: [next id, entries, (deleted ids)]."""
    if not answer or len(answer) < 2:
        return []
    return [(as_text(entry_id), fields) for entry_id, fields in answer[1]]


def _logs(answer: Any) -> list[tuple[StreamId, LogBatch]]:
    return [(i, decode_log_batch(f or {})) for i, f in _stream_entries(answer)]


def _metrics(answer: Any) -> list[tuple[StreamId, MetricBatch]]:
    return [(i, decode_metric_batch(f or {})) for i, f in _stream_entries(answer)]


def _events(
    entries: Iterable[tuple[StreamId, Mapping[Any, Any] | None]],
) -> tuple[list[tuple[StreamId, LearnerEvent]], list[StreamId]]:
    """Decoded events, and the ids of entries that are not events (to acknowledge and drop)."""
    events: list[tuple[StreamId, LearnerEvent]] = []
    rejected: list[StreamId] = []
    for entry_id, fields in entries:
        try:
            events.append((entry_id, decode_learner_event(fields)))
        except ValueError as exc:
            log.warning("dropping learner event %s: %s", entry_id, exc)
            rejected.append(entry_id)
    return events, rejected


def _heartbeats(answer: Mapping[Any, Any]) -> dict[int, float]:
    beats: dict[int, float] = {}
    for learner, value in _text_fields(answer).items():
        try:
            beats[int(learner)] = float(value)
        except ValueError:
            continue
    return beats


def _is_busy_group(exc: Exception) -> bool:
    return "BUSYGROUP" in str(exc)


def _is_missing_group(exc: Exception) -> bool:
    """Redis lost the stream or its group (it restarted without its data, or was flushed)."""
    return "NOGROUP" in str(exc)


def _group_lost(group: str) -> None:
    log.warning(
        "the consumer group %s of %s is gone (Redis lost its data?); creating it again",
        group,
        LEARNER_EVENTS,
    )


# -- clients -----------------------------------------------------------------------------------

RECONNECT_RETRIES: Final = 3


def client(url: str, **options: Any) -> Redis:
    """A client of `url` that outlives a Redis restart: a command whose pooled connection the
    server closed is sent again on a new connection (3 retries, backing off up to 0.5 s),
    where a plain `Redis.from_url` client fails it. `options` go to `Redis.from_url`."""
    from redis import Redis
    from redis.backoff import ExponentialBackoff
    from redis.retry import Retry

    retry = Retry(ExponentialBackoff(cap=0.5, base=0.05), RECONNECT_RETRIES)
    return Redis.from_url(url, retry=retry, **options)


def async_client(url: str, *, retry_timeouts: bool = True, **options: Any) -> AsyncRedis:
    """`client` for asyncio. Without `retry_timeouts`, a command that timed out fails at once
    (only a connection the server closed is retried), so `socket_timeout` bounds it."""
    from redis.asyncio import Redis as AsyncRedis
    from redis.asyncio.retry import Retry
    from redis.backoff import ExponentialBackoff
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import RedisError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    retried: tuple[type[RedisError], ...] = (RedisConnectionError,)
    if retry_timeouts:
        retried += (RedisTimeoutError,)
    retry = Retry(ExponentialBackoff(cap=0.5, base=0.05), RECONNECT_RETRIES, retried)
    return AsyncRedis.from_url(url, retry=retry, **options)


# -- sync helpers (redis.Redis) ----------------------------------------------------------------


def append_logs(redis: Redis, job_id: str, batches: Iterable[LogBatch]) -> list[StreamId]:
    """Append log batches in one round trip; returns their stream ids."""
    pipe = redis.pipeline(transaction=False)
    for batch in batches:
        pipe.xadd(**_xadd_kwargs(logs_key(job_id), encode_log_batch(batch), LOGS_MAXLEN))
    return [as_text(i) for i in pipe.execute()]


def read_logs(
    redis: Redis,
    job_id: str,
    after: StreamId = "0-0",
    *,
    block_ms: int | None = None,
    count: int = 1000,
) -> list[tuple[StreamId, LogBatch]]:
    """Log batches after `after`; with `block_ms`, wait that long for one if there are none
    (0 waits forever). Pass the last id returned as the next `after`."""
    return _logs(redis.xread(**_xread_kwargs(logs_key(job_id), after, block_ms, count)))


def append_metrics(redis: Redis, job_id: str, batches: Iterable[MetricBatch]) -> list[StreamId]:
    pipe = redis.pipeline(transaction=False)
    for batch in batches:
        pipe.xadd(**_xadd_kwargs(metrics_key(job_id), encode_metric_batch(batch), METRICS_MAXLEN))
    return [as_text(i) for i in pipe.execute()]


def read_metrics(
    redis: Redis,
    job_id: str,
    after: StreamId = "0-0",
    *,
    block_ms: int | None = None,
    count: int = 1000,
) -> list[tuple[StreamId, MetricBatch]]:
    return _metrics(redis.xread(**_xread_kwargs(metrics_key(job_id), after, block_ms, count)))


def publish_learner_event(redis: Redis, event: LearnerEvent) -> StreamId:
    """Into the shared stream: for the platform's own reporters (node agent, pod watcher)."""
    fields = encode_learner_event(event)
    return as_text(redis.xadd(**_xadd_kwargs(LEARNER_EVENTS, fields, LEARNER_EVENTS_MAXLEN)))


def publish_job_event(redis: Redis, event: LearnerEvent) -> StreamId:
    """Into the job's own event stream: what a learner's runner may write (it is relayed)."""
    fields = encode_learner_event(event)
    key = events_key(event.job)
    return as_text(redis.xadd(**_xadd_kwargs(key, fields, JOB_EVENTS_MAXLEN)))


def job_events(redis: Redis, job_id: str) -> list[tuple[StreamId, LearnerEvent]]:
    """The events in a job's own stream not relayed yet (entries that are not events left out)."""
    entries = redis.xrange(events_key(job_id)) or []
    return _events((as_text(entry_id), fields) for entry_id, fields in entries)[0]


def ensure_learner_group(redis: Redis, group: str, start_id: StreamId = "0") -> None:
    """Create the consumer group (and the stream) unless it exists. A new group sees entries
    after `start_id`: '0' for all already in the stream, '$' for new ones only."""
    try:
        redis.xgroup_create(LEARNER_EVENTS, group, id=start_id, mkstream=True)
    except Exception as exc:
        if not _is_busy_group(exc):
            raise


def _in_group(redis: Redis, group: str, command: Callable[[], Any]) -> Any:
    """Run a command of the consumer group; if Redis lost the group (and likely the stream:
    it restarted without its data), create both again and run the command once more. The
    new group starts at '0': every event in the new stream came after the loss."""
    try:
        return command()
    except ResponseError as exc:
        if not _is_missing_group(exc):
            raise
    _group_lost(group)
    ensure_learner_group(redis, group)
    return command()


def read_learner_events(
    redis: Redis,
    group: str,
    consumer: str,
    block_ms: int | None = None,
    count: int = 100,
    *,
    pending: bool = False,
) -> list[tuple[StreamId, LearnerEvent]]:
    """Events delivered to `consumer`: new ones, or with `pending=True` those it was given
    before and has not acknowledged (read these first after a restart). Acknowledge each
    event with `ack_learner_events` once handled; entries that are not events are
    acknowledged and dropped here. A group Redis lost is created again (see
    `_in_group`)."""
    kwargs = _xreadgroup_kwargs(group, consumer, block_ms, count, pending)
    answer = _in_group(redis, group, lambda: redis.xreadgroup(**kwargs))
    events, rejected = _events(_stream_entries(answer))
    if rejected:
        redis.xack(LEARNER_EVENTS, group, *rejected)
    return events


def claim_learner_events(
    redis: Redis, group: str, consumer: str, min_idle_ms: int, count: int = 100
) -> list[tuple[StreamId, LearnerEvent]]:
    """Take over events other consumers were given but left unacknowledged for
    `min_idle_ms` (a consumer that died mid-way)."""
    kwargs = _xautoclaim_kwargs(group, consumer, min_idle_ms, count)
    answer = _in_group(redis, group, lambda: redis.xautoclaim(**kwargs))
    events, rejected = _events(_claimed_entries(answer))
    if rejected:
        redis.xack(LEARNER_EVENTS, group, *rejected)
    return events


def ack_learner_events(redis: Redis, group: str, ids: Sequence[StreamId]) -> int:
    return int(redis.xack(LEARNER_EVENTS, group, *ids)) if ids else 0


def record_node_isolation(redis: Redis, node: str, isolated: bool, why: str) -> None:
    redis.hset(NODE_ISOLATION, node, json.dumps({"isolated": isolated, "why": why}))


def node_isolation(redis: Redis) -> dict[str, dict[str, Any]]:
    return _isolation(redis.hgetall(NODE_ISOLATION))


async def anode_isolation(redis: AsyncRedis) -> dict[str, dict[str, Any]]:
    return _isolation(await redis.hgetall(NODE_ISOLATION))


def _isolation(raw: Mapping[Any, Any]) -> dict[str, dict[str, Any]]:
    found = {}
    for node, value in raw.items():
        with contextlib.suppress(ValueError, TypeError):
            found[as_text(node)] = dict(json.loads(as_text(value)))
    return found


def set_heartbeat(redis: Redis, job_id: str, learner: int, time: float | None = None) -> None:
    pipe = redis.pipeline(transaction=False)
    pipe.hset(**_heartbeat_kwargs(job_id, learner, time))
    pipe.expire(heartbeats_key(job_id), HEARTBEAT_TTL_SECONDS)
    pipe.execute()


def get_heartbeats(redis: Redis, job_id: str) -> dict[int, float]:
    """Last heartbeat time of each learner that sent one."""
    return _heartbeats(redis.hgetall(heartbeats_key(job_id)))


def delete_job_streams(redis: Redis, job_id: str) -> int:
    return int(redis.delete(*job_keys(job_id)))


# -- async helpers (redis.asyncio.Redis), same behaviour as the sync ones above ----------------


async def aappend_logs(
    redis: AsyncRedis, job_id: str, batches: Iterable[LogBatch]
) -> list[StreamId]:
    pipe = redis.pipeline(transaction=False)
    for batch in batches:
        pipe.xadd(**_xadd_kwargs(logs_key(job_id), encode_log_batch(batch), LOGS_MAXLEN))
    return [as_text(i) for i in await pipe.execute()]


async def aread_logs(
    redis: AsyncRedis,
    job_id: str,
    after: StreamId = "0-0",
    *,
    block_ms: int | None = None,
    count: int = 1000,
) -> list[tuple[StreamId, LogBatch]]:
    return _logs(await redis.xread(**_xread_kwargs(logs_key(job_id), after, block_ms, count)))


async def aappend_metrics(
    redis: AsyncRedis, job_id: str, batches: Iterable[MetricBatch]
) -> list[StreamId]:
    pipe = redis.pipeline(transaction=False)
    for batch in batches:
        pipe.xadd(**_xadd_kwargs(metrics_key(job_id), encode_metric_batch(batch), METRICS_MAXLEN))
    return [as_text(i) for i in await pipe.execute()]


async def aread_metrics(
    redis: AsyncRedis,
    job_id: str,
    after: StreamId = "0-0",
    *,
    block_ms: int | None = None,
    count: int = 1000,
) -> list[tuple[StreamId, MetricBatch]]:
    kwargs = _xread_kwargs(metrics_key(job_id), after, block_ms, count)
    return _metrics(await redis.xread(**kwargs))


async def aread_metrics_since(
    redis: AsyncRedis, job_id: str, since: float, count: int
) -> list[tuple[StreamId, MetricBatch]]:
    """The metric batches added since `since` (seconds since the epoch: stream ids are the
    times Redis added them), newest first, at most `count`."""
    start = f"{max(int(since * 1000), 0)}-0"
    answer = await redis.xrevrange(metrics_key(job_id), max="+", min=start, count=count) or []
    return [(as_text(i), decode_metric_batch(f or {})) for i, f in answer]


async def aread_metrics_newest(
    redis: AsyncRedis, job_id: str, count: int
) -> list[tuple[StreamId, MetricBatch]]:
    """The newest `count` metric batches, newest first."""
    answer = await redis.xrevrange(metrics_key(job_id), count=count) or []
    return [(as_text(i), decode_metric_batch(f or {})) for i, f in answer]


async def apublish_learner_event(redis: AsyncRedis, event: LearnerEvent) -> StreamId:
    fields = encode_learner_event(event)
    return as_text(await redis.xadd(**_xadd_kwargs(LEARNER_EVENTS, fields, LEARNER_EVENTS_MAXLEN)))


async def aensure_learner_group(redis: AsyncRedis, group: str, start_id: StreamId = "0") -> None:
    try:
        await redis.xgroup_create(LEARNER_EVENTS, group, id=start_id, mkstream=True)
    except Exception as exc:
        if not _is_busy_group(exc):
            raise


async def _ain_group(redis: AsyncRedis, group: str, command: Callable[[], Awaitable[Any]]) -> Any:
    """`_in_group` for asyncio."""
    try:
        return await command()
    except ResponseError as exc:
        if not _is_missing_group(exc):
            raise
    _group_lost(group)
    await aensure_learner_group(redis, group)
    return await command()


async def aread_learner_events(
    redis: AsyncRedis,
    group: str,
    consumer: str,
    block_ms: int | None = None,
    count: int = 100,
    *,
    pending: bool = False,
) -> list[tuple[StreamId, LearnerEvent]]:
    kwargs = _xreadgroup_kwargs(group, consumer, block_ms, count, pending)
    answer = await _ain_group(redis, group, lambda: redis.xreadgroup(**kwargs))
    events, rejected = _events(_stream_entries(answer))
    if rejected:
        await redis.xack(LEARNER_EVENTS, group, *rejected)
    return events


async def aclaim_learner_events(
    redis: AsyncRedis, group: str, consumer: str, min_idle_ms: int, count: int = 100
) -> list[tuple[StreamId, LearnerEvent]]:
    kwargs = _xautoclaim_kwargs(group, consumer, min_idle_ms, count)
    answer = await _ain_group(redis, group, lambda: redis.xautoclaim(**kwargs))
    events, rejected = _events(_claimed_entries(answer))
    if rejected:
        await redis.xack(LEARNER_EVENTS, group, *rejected)
    return events


async def aack_learner_events(redis: AsyncRedis, group: str, ids: Sequence[StreamId]) -> int:
    return int(await redis.xack(LEARNER_EVENTS, group, *ids)) if ids else 0


async def aset_heartbeat(
    redis: AsyncRedis, job_id: str, learner: int, time: float | None = None
) -> None:
    pipe = redis.pipeline(transaction=False)
    pipe.hset(**_heartbeat_kwargs(job_id, learner, time))
    pipe.expire(heartbeats_key(job_id), HEARTBEAT_TTL_SECONDS)
    await pipe.execute()


async def aget_heartbeats(redis: AsyncRedis, job_id: str) -> dict[int, float]:
    return _heartbeats(await redis.hgetall(heartbeats_key(job_id)))


async def aget_heartbeats_of(
    redis: AsyncRedis, job_ids: Sequence[str]
) -> dict[str, dict[int, float]]:
    """`aget_heartbeats` of many jobs in one round trip."""
    pipe = redis.pipeline(transaction=False)
    for job_id in job_ids:
        pipe.hgetall(heartbeats_key(job_id))
    answers = await pipe.execute()
    return {job_id: _heartbeats(answer) for job_id, answer in zip(job_ids, answers, strict=True)}


async def adelete_job_streams(redis: AsyncRedis, job_id: str) -> int:
    return int(await redis.delete(*job_keys(job_id)))


async def aretire_job_streams(
    redis: AsyncRedis, job_id: str, ttl_s: int = FINISHED_STREAMS_TTL_SECONDS
) -> None:
    """Let a finished job's streams expire; readers then fall back to the stored copies."""
    pipe = redis.pipeline(transaction=False)
    for key in job_keys(job_id):
        pipe.expire(key, ttl_s)
    await pipe.execute()


async def akeep_job_streams(redis: AsyncRedis, job_id: str) -> None:
    """Take back an expiry set on a job's streams (it runs again: resumed, or restarted)."""
    pipe = redis.pipeline(transaction=False)
    for key in job_keys(job_id):
        pipe.persist(key)
    await pipe.execute()


# -- small decoders ---------------------------------------------------------------------------


def as_text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes | bytearray) else str(value)


def _text_fields(fields: Mapping[Any, Any]) -> dict[str, str]:
    return {as_text(k): as_text(v) for k, v in fields.items()}


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def _float(value: str | None) -> float:
    try:
        return float(value) if value is not None else 0.0
    except ValueError:
        return 0.0


def _now(time: float | None) -> float:
    return clock.time() if time is None else time
