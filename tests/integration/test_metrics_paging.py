"""Metric points a page at a time: every point once, stored then live, however deep the page."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from storage import streams
from storage.streams import MetricBatch
from tests.integration.api_harness import MANIFEST, Harness, submit


def _batch(learner: int, first: int, steps: range) -> MetricBatch:
    lines = tuple(streams.metric_line(learner, 1.0, s, {"loss": 1 / s}) for s in steps)
    return MetricBatch(learner, 0, first, lines)


async def _all_pages(
    client: httpx.AsyncClient, path: str, limit: int, **query: Any
) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": limit, **query}
    while True:
        page = await client.get(path, params=params)
        assert page.status_code == 200, page.text
        body = page.json()
        assert len(body["metrics"]) <= limit
        points += body["metrics"]
        if body["next"] is None:
            return points
        params = {"limit": limit, "cursor": body["next"], **query}


@pytest.mark.parametrize("limit", [1, 7, 100, 1000])
async def test_pages_hold_every_point_once_in_order(
    api: Harness, redis_url: str, limit: int
) -> None:
    async with await api.new_user("pager") as alice:
        job_id = (await submit(alice, MANIFEST)).json()["id"]
        objects = api.app.state.dlaas.objects
        # Learner 1: 250 points stored, 40 more only in the live stream (some of the live
        # batch repeats what is stored already); learner 2: 30 stored, nothing live.
        stored_1 = "".join(
            streams.metric_line(1, 1.0, s, {"loss": 1 / s}) + "\n" for s in range(1, 251)
        )
        stored_2 = "".join(
            streams.metric_line(2, 1.0, s, {"loss": 1 / s}) + "\n" for s in range(1, 31)
        )
        objects.put_bytes(f"jobs/{job_id}/metrics/learner-1.jsonl", stored_1.encode())
        objects.put_bytes(f"jobs/{job_id}/metrics/learner-2.jsonl", stored_2.encode())
        redis = Redis.from_url(redis_url)
        try:
            await streams.aappend_metrics(redis, job_id, [_batch(1, 241, range(241, 291))])
            path = f"/v2/jobs/{job_id}/metrics"
            whole = (await alice.get(path)).json()["metrics"]
            assert [(p["learner"], p["step"]) for p in whole] == [
                *((1, s) for s in range(1, 291)),
                *((2, s) for s in range(1, 31)),
            ]
            assert await _all_pages(alice, path, limit) == whole
            one = await _all_pages(alice, path, limit, learner=2)
            assert one == [p for p in whole if p["learner"] == 2]
        finally:
            await redis.delete(streams.metrics_key(job_id))
            await redis.aclose()


async def test_a_bad_metrics_cursor_or_limit_is_refused_naming_it(api: Harness) -> None:
    async with await api.new_user("badpager") as alice:
        job_id = (await submit(alice)).json()["id"]
        path = f"/v2/jobs/{job_id}/metrics"
        for params, field in (({"cursor": "junk"}, "cursor"), ({"limit": 0}, "limit")):
            refused = await alice.get(path, params=params)
            assert refused.status_code == 422, refused.text
            assert refused.json()["field"] == field
        jobs_cursor = (await alice.get("/v2/jobs", params={"limit": 1})).json()["next"]
        if jobs_cursor is not None:  # a cursor of another list
            assert (await alice.get(path, params={"cursor": jobs_cursor})).status_code == 422
