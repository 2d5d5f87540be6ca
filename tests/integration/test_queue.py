"""GET /v2/queue on SQLite and PostgreSQL: the queue a scheduling pass published in Redis,
in its order, showing each caller only their teams' jobs (a platform admin: all)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx

from storage.queue_view import QUEUE_KEY, QueuedJob, QueueView, apublish_queue
from tests.integration.api_harness import ApiUser, Harness, submit


async def _job(user: ApiUser, team: str) -> str:
    answer = await submit(user.client, team=team)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


async def _queue(client: httpx.AsyncClient, **params: str | int) -> dict:
    answer = await client.get("/v2/queue", params=params)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


async def test_nothing_published_yet_is_an_empty_queue_at_no_time(api: Harness) -> None:
    await api.app.state.dlaas.redis.delete(QUEUE_KEY)
    assert await _queue(api.admin) == {"at": None, "jobs": [], "next": None}


async def test_each_caller_sees_their_teams_waiting_jobs_in_the_queues_order(
    api: Harness,
) -> None:
    ana, bo = await api.add_user("ana"), await api.add_user("bo")
    vision = await api.add_team("vision", {ana: "member"})
    speech = await api.add_team("speech", {bo: "member", ana: "viewer"})
    a1, a2 = await _job(ana, vision), await _job(ana, vision)
    b1, gone = await _job(bo, speech), await _job(bo, speech)
    assert (await bo.client.delete(f"/v2/jobs/{gone}")).status_code == 202

    at = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
    soon = at + timedelta(minutes=5)
    view = QueueView(
        at=at,
        jobs=[
            QueuedJob(b1, speech, 1, "capacity", "waiting for 2 free A100", soon),
            QueuedJob(gone, speech, 2, "capacity", "deleted since the pass"),
            QueuedJob(a2, vision, 3, "quota", "team vision uses its 8 A100"),
            QueuedJob("training-neverexisted", vision, 4, "quota", "no such job"),
            QueuedJob(a1, vision, 5, "behind", "waiting behind job " + a2),
        ],
    )
    await apublish_queue(api.app.state.dlaas.redis, view)

    everyone = await _queue(api.admin)
    assert datetime.fromisoformat(everyone["at"]) == at
    assert [(j["id"], j["position"]) for j in everyone["jobs"]] == [(b1, 1), (a2, 3), (a1, 5)]
    first = everyone["jobs"][0]
    assert first["name"] == "tiny" and first["team"] == speech and first["owner"] == bo.name
    assert (first["cause"], first["reason"]) == ("capacity", "waiting for 2 free A100")
    assert datetime.fromisoformat(first["estimated_start"]) == soon
    assert first["submitted_at"] and everyone["jobs"][1]["estimated_start"] is None

    # bo is only in speech; ana is a member of vision and a viewer of speech
    assert [j["id"] for j in (await _queue(bo.client))["jobs"]] == [b1]
    assert [j["id"] for j in (await _queue(ana.client))["jobs"]] == [b1, a2, a1]
    assert [j["id"] for j in (await _queue(ana.client, team=vision))["jobs"]] == [a2, a1]
    assert (await _queue(bo.client, team=vision))["jobs"] == []
    outsider = await api.add_user("outsider")
    assert (await _queue(outsider.client)) == {"at": everyone["at"], "jobs": [], "next": None}

    # paged by place in the queue
    page = await _queue(ana.client, limit=2)
    assert [j["id"] for j in page["jobs"]] == [b1, a2] and page["next"]
    rest = await _queue(ana.client, limit=2, cursor=page["next"])
    assert [j["id"] for j in rest["jobs"]] == [a1] and rest["next"] is None
