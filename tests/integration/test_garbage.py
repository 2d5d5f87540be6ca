"""The lifecycle manager's collection of what is kept past its retention, on real stores."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from redis.asyncio import Redis
from sqlalchemy import func, select

from api.state import ApiState
from lifecycle_manager.entrypoints.wiring import open_context
from lifecycle_manager.glue import garbage
from lifecycle_manager.glue.context import Context, no_pass
from storage import idempotency, pending_archives, streams, users
from storage import jobs as repo
from storage.job_states import JobState
from storage.migrate import upgrade
from storage.models import IdempotentRequest, Job, JobEvent
from storage.settings import Settings
from tests.integration.api_harness import running_api, submit

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


@pytest.fixture
async def ctx(tmp_path: Path, redis_url: str) -> AsyncIterator[Context]:
    settings = Settings(
        home=tmp_path,
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'dlaas.db'}",
        redis_url=redis_url,
        objects_dir=tmp_path / "objects",
    )
    upgrade(settings.database_url)
    context = open_context(settings)
    context.request_pass = no_pass  # no worker takes tasks here: the test runs passes
    context.clock = lambda: NOW
    try:
        yield context
    finally:
        await context.redis.delete(pending_archives.KEY)
        await context.aclose()


async def _job(ctx: Context, job_id: str, *states: JobState) -> None:
    async with ctx.sessions() as session, session.begin():
        owner, _ = await users.create_user(session, f"owner-{secrets.token_hex(4)}")
        await repo.create_job(
            session, job_id=job_id, owner_id=owner.id, name="j", learners=1, manifest={}
        )
    async with ctx.sessions() as session, session.begin():
        for state in states:
            assert (await repo.transition(session, job_id, state, "test")).changed


def _unique(name: str) -> str:
    return f"training-{name}-{secrets.token_hex(4)}"


async def test_archives_of_submissions_without_a_job_are_removed_once_old(ctx: Context) -> None:
    orphan, young, kept = _unique("orphan"), _unique("young"), _unique("kept")
    await _job(ctx, kept)
    two_hours_ago = (NOW - timedelta(hours=2)).timestamp()
    for job_id, noted in ((orphan, two_hours_ago), (kept, two_hours_ago), (young, NOW.timestamp())):
        ctx.objects.put_bytes(f"jobs/{job_id}/model.zip", b"PK")
        await pending_archives.note(ctx.redis, job_id, noted)
    collected = await garbage.collect(ctx)
    assert collected.orphan_archives == 1
    assert not ctx.objects.exists(f"jobs/{orphan}/model.zip")
    assert ctx.objects.exists(f"jobs/{kept}/model.zip")
    assert ctx.objects.exists(f"jobs/{young}/model.zip")
    assert await pending_archives.older_than(ctx.redis, 0, NOW.timestamp()) == [young]


async def test_streams_of_finished_jobs_expire_and_those_of_no_job_go(ctx: Context) -> None:
    finished, running, unknown = _unique("finished"), _unique("running"), _unique("unknown")
    await _job(ctx, finished, JobState.DEPLOYING, JobState.RUNNING, JobState.COMPLETED)
    await _job(ctx, running, JobState.DEPLOYING, JobState.RUNNING)
    for job_id in (finished, running, unknown):
        await ctx.redis.xadd(streams.logs_key(job_id), {"x": "1"})
        await ctx.redis.xadd(streams.metrics_key(job_id), {"x": "1"})
    collected = await garbage.collect(ctx)
    assert collected.streams_retired >= 4
    assert 0 < await ctx.redis.ttl(streams.logs_key(finished)) <= 3600
    assert 0 < await ctx.redis.ttl(streams.metrics_key(finished)) <= 3600
    assert await ctx.redis.ttl(streams.logs_key(running)) == -1
    assert not await ctx.redis.exists(streams.logs_key(unknown), streams.metrics_key(unknown))
    await ctx.redis.delete(*streams.job_keys(finished), *streams.job_keys(running))


async def test_deleted_jobs_are_dropped_with_their_events_after_the_retention(
    ctx: Context,
) -> None:
    old, recent = _unique("old"), _unique("recent")
    for job_id, deleted in ((old, NOW - timedelta(days=8)), (recent, NOW - timedelta(days=1))):
        await _job(ctx, job_id, JobState.DELETED)
        async with ctx.sessions() as session, session.begin():
            job = await session.get(Job, job_id)
            assert job is not None
            job.deleted_at = deleted
    collected = await garbage.collect(ctx)
    assert collected.deleted_jobs == 1
    async with ctx.sessions() as session:
        assert await session.get(Job, old) is None
        assert await session.get(Job, recent) is not None
        assert await repo.list_events(session, old) == []
        assert await repo.list_events(session, recent) != []
        # Events go with their job (ON DELETE CASCADE).
        assert await session.scalar(select(func.count()).where(JobEvent.job_id == old)) == 0


async def test_a_submission_notes_its_archive_until_its_job_row_is_written(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_api(
        f"sqlite+aiosqlite:///{tmp_path / 'api.db'}", redis_url, tmp_path / "objects"
    ) as api:
        noted: list[str] = []
        real_note = pending_archives.note

        async def note(redis: Redis, job_id: str, now: float | None = None) -> None:
            noted.append(job_id)
            await real_note(redis, job_id, now)

        monkeypatch.setattr(pending_archives, "note", note)
        async with await api.new_user("noter") as alice:
            answer = await submit(alice)
        assert answer.status_code == 201
        assert noted == [answer.json()["id"]]
        state: ApiState = api.app.state.dlaas
        assert await state.redis.zscore(pending_archives.KEY, noted[0]) is None


async def test_idempotency_keys_are_forgotten_past_their_retention(ctx: Context) -> None:
    scope = secrets.token_hex(32)
    start = NOW - timedelta(hours=48)
    for key in ("old", "new"):
        claimed = await idempotency.claim(ctx.sessions, scope, key, "POST", "/v2/x", start)
        assert isinstance(claimed, idempotency.Claimed)
        start += timedelta(hours=20)  # "old" is 48 h old at NOW, "new" 28 h
    ctx.settings = ctx.settings.model_copy(update={"idempotency_retention_s": 30 * 3600.0})
    collected = await garbage.collect(ctx)
    assert collected.idempotent_requests == 1
    async with ctx.sessions() as session:
        assert await session.get(IdempotentRequest, (scope, "old")) is None
        assert await session.get(IdempotentRequest, (scope, "new")) is not None


async def test_streams_of_long_halted_jobs_expire_until_the_job_runs_again(ctx: Context) -> None:
    long_ago, lately = _unique("halted-long"), _unique("halted-lately")
    for job_id, halted_at in ((long_ago, NOW - timedelta(days=2)), (lately, NOW)):
        await _job(ctx, job_id, JobState.DEPLOYING, JobState.RUNNING, JobState.HALTED)
        async with ctx.sessions() as session, session.begin():
            job = await session.get(Job, job_id)
            assert job is not None
            job.updated_at = halted_at
        await ctx.redis.xadd(streams.logs_key(job_id), {"x": "1"})
    await garbage.collect(ctx)
    assert 0 < await ctx.redis.ttl(streams.logs_key(long_ago)) <= 3600
    assert await ctx.redis.ttl(streams.logs_key(lately)) == -1
    await streams.akeep_job_streams(ctx.redis, long_ago)  # what deploying it again does
    assert await ctx.redis.ttl(streams.logs_key(long_ago)) == -1
    await ctx.redis.delete(*streams.job_keys(long_ago), *streams.job_keys(lately))


async def test_events_of_finished_jobs_go_after_their_retention(ctx: Context) -> None:
    finished, running = _unique("done"), _unique("running")
    await _job(ctx, finished, JobState.DEPLOYING, JobState.RUNNING, JobState.COMPLETED)
    await _job(ctx, running, JobState.DEPLOYING, JobState.RUNNING)
    long_ago = NOW - timedelta(seconds=ctx.settings.event_retention_s + 3600)
    async with ctx.sessions() as session, session.begin():
        for event in [
            *await repo.list_events(session, finished),
            *await repo.list_events(session, running),
        ]:
            event.time = long_ago
    collected = await garbage.collect(ctx)
    assert collected.old_events >= 4
    async with ctx.sessions() as session:
        assert await repo.list_events(session, finished) == []
        assert len(await repo.list_events(session, running)) == 3
        job = await session.get(Job, finished)
        assert job is not None and job.state == JobState.COMPLETED
