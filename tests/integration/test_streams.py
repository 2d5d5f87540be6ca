"""Redis streams of job logs, metrics, learner events and heartbeats, on a real Redis."""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections.abc import AsyncIterator

import pytest
import redis
import redis.asyncio

from storage import streams
from storage.streams import LearnerEvent, LogBatch, MetricBatch, MetricRecord


@pytest.fixture
def job_id() -> str:
    return f"training-{secrets.token_hex(5)}"


@pytest.fixture
async def aredis(redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def text_redis(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url, decode_responses=True)


def _blocked(clients: list[dict[str, str]], name: str) -> bool:
    return any(c.get("name") == name and "b" in c.get("flags", "") for c in clients)


def wait_blocked(admin: redis.Redis, name: str, timeout_s: float = 10.0) -> None:
    """Until the client named `name` is blocked in a read (Redis's CLIENT LIST says so)."""
    deadline = time.monotonic() + timeout_s
    while not _blocked(admin.client_list(), name):
        assert time.monotonic() < deadline, f"client {name} never blocked in a read"
        time.sleep(0.002)


async def await_blocked(admin: redis.asyncio.Redis, name: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not _blocked(await admin.client_list(), name):
        assert time.monotonic() < deadline, f"client {name} never blocked in a read"
        await asyncio.sleep(0.002)


def line_batch(learner: int, first: int, *lines: str, attempt: int = 0) -> LogBatch:
    return LogBatch(learner, attempt, first, lines, 1700000000.123456)


def point_batch(learner: int, first: int, *records: MetricRecord) -> MetricBatch:
    points = tuple(streams.metric_line(r.learner, r.time, r.step, r.values) for r in records)
    return MetricBatch(learner, 0, first, points)


def test_records_survive_encoding() -> None:
    batch = line_batch(2, 41, "epoch 1 loss=0.25 ünïcode", "", "last", attempt=3)
    assert streams.decode_log_batch(streams.encode_log_batch(batch)) == batch
    metrics = point_batch(
        1,
        7,
        MetricRecord(1, 12.5, 40, {"loss": 0.25, "acc": 0.9}),
        MetricRecord(1, 12.5, None, {"loss": 2.0}),
    )
    decoded = streams.decode_metric_batch(streams.encode_metric_batch(metrics))
    assert decoded == metrics
    assert decoded.records() == [
        MetricRecord(1, 12.5, 40, {"loss": 0.25, "acc": 0.9}),
        MetricRecord(1, 12.5, None, {"loss": 2.0}),
    ]
    event = streams.exit_event("training-x", 2, 3, 137, "SIGKILL", "OOMKilled", time=5.0)
    assert streams.decode_learner_event(streams.encode_learner_event(event)) == event
    encoded = {k.encode(): v.encode() for k, v in streams.encode_learner_event(event).items()}
    assert streams.decode_learner_event(encoded) == event


def test_damaged_records_decode_without_raising() -> None:
    assert streams.decode_log_batch({b"lines": b"x"}) == LogBatch(0, 0, 1, ("x",), 0.0)
    damaged = streams.decode_metric_batch({"l": "1", "m": "not json\n[1]"})
    assert damaged.records() == [MetricRecord(1, 0.0, None, {}), MetricRecord(1, 0.0, None, {})]
    odd = '{"step": "7", "time": true, "values": {"loss": "high", "ok": 1}}'
    assert streams.decode_metric_line(odd, 2) == MetricRecord(2, 0.0, None, {"ok": 1.0})
    with pytest.raises(ValueError, match="not a learner event"):
        streams.decode_learner_event({"job": "j"})


def test_events_are_checked_when_encoded() -> None:
    with pytest.raises(ValueError, match="kind"):
        streams.encode_learner_event(LearnerEvent("j", 1, 1, "bogus"))
    with pytest.raises(ValueError, match="header"):
        streams.encode_learner_event(LearnerEvent("j", 1, 1, "status", {"job": "other"}))
    with pytest.raises(ValueError, match="DOWNLOADING"):
        streams.status_event("j", 1, 1, "SLEEPING")


def test_key_names() -> None:
    assert streams.logs_key("training-a") == "dlaas:job:training-a:logs"
    assert streams.metrics_key("training-a") == "dlaas:job:training-a:metrics"
    assert streams.heartbeats_key("training-a") == "dlaas:job:training-a:heartbeats"
    assert streams.LEARNER_EVENTS == "dlaas:learner-events"


def test_logs_append_in_one_batch_and_read_after_an_id(
    redis_client: redis.Redis, text_redis: redis.Redis, job_id: str
) -> None:
    lines = [line_batch(1 + n % 2, 1 + n // 2, f"line {n}") for n in range(5)]
    ids = streams.append_logs(redis_client, job_id, lines)

    assert len(ids) == 5
    assert streams.read_logs(redis_client, job_id) == list(zip(ids, lines, strict=True))
    assert streams.read_logs(text_redis, job_id, after=ids[1], count=2) == list(
        zip(ids[2:4], lines[2:4], strict=True)
    )
    assert streams.read_logs(redis_client, job_id, after=ids[-1]) == []
    assert streams.read_logs(redis_client, "training-none") == []
    assert streams.append_logs(redis_client, job_id, []) == []


# Wake-up latency on a shared, busy machine is noisy: the best of a few tries must be prompt
# (a reader that polls instead of blocking would miss every time).
TRIES = 3
PROMPT = 0.05


def test_blocking_read_wakes_on_a_new_line(
    redis_client: redis.Redis, redis_url: str, job_id: str
) -> None:
    name = f"reader-{secrets.token_hex(4)}"
    reader = redis.Redis.from_url(redis_url, client_name=name)
    redis_client.ping()  # connected already: the timing below is the stream's alone
    delays = []
    try:
        for n in range(TRIES):
            got: list[tuple[float, list[tuple[str, LogBatch]]]] = []

            def follow() -> None:
                entries = streams.read_logs(reader, job_id, after="$", block_ms=5000)
                got.append((time.monotonic(), entries))  # noqa: B023 - joined in this loop

            thread = threading.Thread(target=follow)
            thread.start()
            wait_blocked(redis_client, name)
            sent = time.monotonic()
            streams.append_logs(redis_client, job_id, [line_batch(1, n + 1, f"wake {n}")])
            thread.join(5)
            woke, entries = got[0]
            assert [batch.lines for _, batch in entries] == [(f"wake {n}",)]
            delays.append(woke - sent)
            if delays[-1] < PROMPT:
                break
    finally:
        reader.close()
    assert min(delays) < PROMPT, delays


async def test_async_blocking_read_wakes_on_a_new_line(
    aredis: redis.asyncio.Redis, redis_url: str, job_id: str
) -> None:
    name = f"reader-{secrets.token_hex(4)}"
    reader = redis.asyncio.Redis.from_url(redis_url, client_name=name)
    await aredis.ping()
    delays = []
    try:
        for n in range(TRIES):
            follow = asyncio.create_task(
                streams.aread_logs(reader, job_id, after="$", block_ms=5000)
            )
            await await_blocked(aredis, name)
            sent = time.monotonic()
            line = line_batch(2, n + 1, f"async {n}")
            ids = await streams.aappend_logs(aredis, job_id, [line])
            entries = await asyncio.wait_for(follow, 5)
            delays.append(time.monotonic() - sent)
            assert entries == [(ids[0], line)]
            if delays[-1] < PROMPT:
                break
    finally:
        await reader.aclose()
    assert min(delays) < PROMPT, delays


async def test_blocking_read_times_out_empty(aredis: redis.asyncio.Redis, job_id: str) -> None:
    started = time.monotonic()
    assert await streams.aread_logs(aredis, job_id, after="$", block_ms=100) == []
    assert 0.09 <= time.monotonic() - started < 1


def test_metrics_sync_and_async_read_the_same_records(
    redis_client: redis.Redis, job_id: str
) -> None:
    records = [
        point_batch(1, 1, MetricRecord(1, 10.0, 1, {"loss": 1.5})),
        point_batch(2, 1, MetricRecord(2, 11.0, None, {"accuracy": 0.5, "lr": 0.01})),
    ]
    ids = streams.append_metrics(redis_client, job_id, records)

    assert streams.read_metrics(redis_client, job_id) == list(zip(ids, records, strict=True))
    assert streams.read_metrics(redis_client, job_id, after=ids[0]) == [(ids[1], records[1])]


async def test_async_metrics(aredis: redis.asyncio.Redis, job_id: str) -> None:
    record = point_batch(1, 1, MetricRecord(1, 3.0, 7, {"loss": 0.5}))
    ids = await streams.aappend_metrics(aredis, job_id, [record])
    assert await streams.aread_metrics(aredis, job_id) == [(ids[0], record)]


def test_learner_events_with_a_consumer_group(redis_client: redis.Redis, job_id: str) -> None:
    group = f"test-{secrets.token_hex(4)}"
    streams.ensure_learner_group(redis_client, group, start_id="$")
    streams.ensure_learner_group(redis_client, group)  # exists already: no error
    sent = [
        streams.status_event(job_id, 1, 1, "RUNNING"),
        streams.checkpoint_event(job_id, 1, 1, "ckpt-000000000100"),
        streams.exit_event(job_id, 1, 1, exit_code=0, reason="done"),
    ]
    for event in sent:
        streams.publish_learner_event(redis_client, event)
    redis_client.xadd(streams.LEARNER_EVENTS, {"garbage": "1"})

    first = streams.read_learner_events(redis_client, group, "manager-a", count=10)
    assert [event for _, event in first] == sent  # the garbage entry is dropped
    assert streams.ack_learner_events(redis_client, group, [first[0][0]]) == 1

    # After a restart, manager-a sees what it was given and did not acknowledge.
    again = streams.read_learner_events(redis_client, group, "manager-a", pending=True)
    assert again == first[1:]
    assert streams.read_learner_events(redis_client, group, "manager-a", block_ms=10) == []

    # manager-a died: manager-b claims its unacknowledged events.
    claimed = streams.claim_learner_events(redis_client, group, "manager-b", min_idle_ms=0)
    assert claimed == first[1:]
    assert streams.read_learner_events(redis_client, group, "manager-a", pending=True) == []
    assert streams.ack_learner_events(redis_client, group, [i for i, _ in claimed]) == 2
    assert streams.claim_learner_events(redis_client, group, "manager-b", min_idle_ms=0) == []
    assert streams.ack_learner_events(redis_client, group, []) == 0
    redis_client.xgroup_destroy(streams.LEARNER_EVENTS, group)


def test_a_lost_consumer_group_is_created_again(redis_client: redis.Redis, job_id: str) -> None:
    group = f"test-{secrets.token_hex(4)}"
    streams.ensure_learner_group(redis_client, group, start_id="$")
    redis_client.delete(streams.LEARNER_EVENTS)  # the stream and its groups: a Redis restart
    assert streams.claim_learner_events(redis_client, group, "manager", min_idle_ms=0) == []
    redis_client.delete(streams.LEARNER_EVENTS)
    assert streams.read_learner_events(redis_client, group, "manager", block_ms=10) == []
    event = streams.status_event(job_id, 1, 1, "RUNNING")
    event_id = streams.publish_learner_event(redis_client, event)
    assert streams.read_learner_events(redis_client, group, "manager") == [(event_id, event)]
    redis_client.xgroup_destroy(streams.LEARNER_EVENTS, group)


async def test_async_learner_events(aredis: redis.asyncio.Redis, job_id: str) -> None:
    group = f"test-{secrets.token_hex(4)}"
    await streams.aensure_learner_group(aredis, group, start_id="$")
    await streams.aensure_learner_group(aredis, group)
    # Whether the read blocks before the event is published or comes after it, the group
    # hands the event to it: nothing to wait for.
    reading = asyncio.create_task(
        streams.aread_learner_events(aredis, group, "manager", block_ms=5000)
    )
    publisher = redis.asyncio.Redis(connection_pool=aredis.connection_pool)
    event = streams.status_event(job_id, 2, 1, "DOWNLOADING")
    event_id = await streams.apublish_learner_event(publisher, event)

    assert await asyncio.wait_for(reading, 5) == [(event_id, event)]
    claimed = await streams.aclaim_learner_events(aredis, group, "other", min_idle_ms=0)
    assert claimed == [(event_id, event)]
    assert await streams.aack_learner_events(aredis, group, [event_id]) == 1
    assert await streams.aread_learner_events(aredis, group, "other", pending=True) == []
    await aredis.xgroup_destroy(streams.LEARNER_EVENTS, group)


def test_heartbeats(redis_client: redis.Redis, text_redis: redis.Redis, job_id: str) -> None:
    assert streams.get_heartbeats(redis_client, job_id) == {}
    streams.set_heartbeat(redis_client, job_id, 1, time=100.0)
    streams.set_heartbeat(redis_client, job_id, 2, time=101.5)
    streams.set_heartbeat(redis_client, job_id, 1, time=102.0)

    assert streams.get_heartbeats(text_redis, job_id) == {1: 102.0, 2: 101.5}
    assert 0 < redis_client.ttl(streams.heartbeats_key(job_id)) <= streams.HEARTBEAT_TTL_SECONDS
    before = time.time()
    streams.set_heartbeat(redis_client, job_id, 3)
    assert streams.get_heartbeats(redis_client, job_id)[3] >= before


async def test_async_heartbeats_and_cleanup(aredis: redis.asyncio.Redis, job_id: str) -> None:
    await streams.aset_heartbeat(aredis, job_id, 1, time=5.0)
    await streams.aappend_logs(aredis, job_id, [line_batch(1, 1, "x")])
    assert await streams.aget_heartbeats(aredis, job_id) == {1: 5.0}
    silent = f"{job_id}-silent"
    assert await streams.aget_heartbeats_of(aredis, [job_id, silent]) == {
        job_id: {1: 5.0},
        silent: {},
    }

    assert await streams.adelete_job_streams(aredis, job_id) == 2
    assert await streams.aget_heartbeats(aredis, job_id) == {}
    assert await streams.aread_logs(aredis, job_id) == []


def test_a_client_outlives_its_connection_being_closed_by_the_server(
    redis_client: redis.Redis, redis_url: str
) -> None:
    client = streams.client(redis_url)
    try:
        client.set("dlaas:test-reconnect", "1", ex=60)
        assert redis_client.client_kill_filter(_id=client.client_id()) == 1  # a restart, for it
        assert client.get("dlaas:test-reconnect") == b"1"
    finally:
        client.close()


async def test_an_async_client_outlives_its_connection_being_closed_by_the_server(
    redis_client: redis.Redis, redis_url: str
) -> None:
    client = streams.async_client(redis_url)
    try:
        await client.set("dlaas:test-reconnect-async", "1", ex=60)
        assert redis_client.client_kill_filter(_id=await client.client_id()) == 1
        assert await client.get("dlaas:test-reconnect-async") == b"1"
    finally:
        await client.aclose()
