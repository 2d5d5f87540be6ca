"""Rate limits per token and per address, and the cap on a user's open log follows."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from api import follow_slots
from api.state import ApiState
from tests.integration.api_harness import Harness, running_api, submit


@pytest.fixture
async def api(tmp_path: Path, redis_url: str) -> AsyncIterator[Harness]:
    database_url = f"sqlite+aiosqlite:///{tmp_path / 'api.db'}"
    async with running_api(database_url, redis_url, tmp_path / "objects") as harness:
        yield harness


def configure(api: Harness, **settings: Any) -> None:
    state: ApiState = api.app.state.dlaas
    state.settings = state.settings.model_copy(update=settings)


async def test_a_token_past_its_rate_gets_429_with_retry_after(api: Harness) -> None:
    async with await api.new_user("eager") as eager, await api.new_user("calm") as calm:
        configure(api, rate_limit_per_s=0.01, rate_limit_burst=3, address_rate_limit_per_s=0)
        answers = [(await eager.get("/v2/jobs")).status_code for _ in range(3)]
        assert answers == [200, 200, 200]
        refused = await eager.get("/v2/jobs")
        assert refused.status_code == 429
        assert refused.json()["error"] == "rate_limited"
        assert refused.json()["field"] == "Authorization"
        assert 1 <= int(refused.headers["retry-after"]) <= 100
        # Another token has its own bucket; health checks are not counted.
        assert (await calm.get("/v2/jobs")).status_code == 200
        assert [(await eager.get("/healthz")).status_code for _ in range(5)] == [200] * 5


async def test_an_address_past_its_rate_gets_429(api: Harness) -> None:
    configure(api, rate_limit_per_s=0, address_rate_limit_per_s=0.01, address_rate_limit_burst=4)
    async with api.client(None) as anonymous:
        answers = [(await anonymous.get("/v2/jobs")).status_code for _ in range(5)]
    assert answers == [401, 401, 401, 401, 429]


async def test_limits_set_to_zero_are_off(api: Harness) -> None:
    configure(api, rate_limit_per_s=0, address_rate_limit_per_s=0)
    async with await api.new_user("free") as free:
        assert {(await free.get("/v2/jobs")).status_code for _ in range(30)} == {200}


async def test_a_follow_past_the_users_cap_is_refused_naming_follow(api: Harness) -> None:
    async with await api.new_user("watcher") as watcher:
        job_id = (await submit(watcher)).json()["id"]
        configure(api, max_follows_per_user=0)
        refused = await watcher.get(f"/v2/jobs/{job_id}/logs", params={"follow": "true"})
        assert refused.status_code == 429
        assert refused.json()["error"] == "too_many_follows"
        assert refused.json()["field"] == "follow"
        # Reading the log without follow is not capped.
        assert (await watcher.get(f"/v2/jobs/{job_id}/logs")).status_code == 200


async def test_follow_slots_are_counted_given_back_and_lapse(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    redis = Redis.from_url(redis_url)
    user = 10_000_000 + id(redis) % 1_000_000
    try:
        first = await follow_slots.take_slot(redis, user, 2)
        second = await follow_slots.take_slot(redis, user, 2)
        assert first is not None and second is not None
        assert await follow_slots.take_slot(redis, user, 2) is None
        await first.give_back()
        third = await follow_slots.take_slot(redis, user, 2)
        assert third is not None
        # A slot whose follow vanished lapses: give the rest a lapse time in the past.
        key = f"dlaas:follows:{user}"
        await redis.zadd(key, {second.member: 1.0, third.member: 1.0}, xx=True)
        fourth = await follow_slots.take_slot(redis, user, 2)
        assert fourth is not None
        # Keeping a slot alive pushes its lapse back.
        lapse = await redis.zscore(key, fourth.member)
        assert lapse is not None
        await redis.zadd(key, {fourth.member: lapse - 30}, xx=True)
        monkeypatch.setattr(follow_slots, "REFRESH_EVERY_S", 0.0)
        await fourth.keep_alive()
        kept = await redis.zscore(key, fourth.member)
        assert kept is not None and kept > lapse - 30
        await redis.delete(key)
    finally:
        await redis.aclose()
