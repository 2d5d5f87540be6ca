"""Teams' quotas through the API, on SQLite and PostgreSQL: set by platform admins in user
units, read back by the team and by the scheduling pass (`storage.team_quotas`), refused
naming the field; a job's priority bounded by its team's max_priority; and a job larger
than its team's quota plus borrowing limit refused at submission."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from storage.cluster_nodes import NodeCapacity, apublish_nodes
from storage.team_quotas import team_quotas
from tests.integration.api_harness import MANIFEST, Harness, running_api, submit

FULL = {
    "gpus": {"A100": 8, "T4": 2},
    "cpus": 16,
    "memory": "64GiB",
    "jobs": 10,
    "borrowing_limit": {"gpus": {"A100": 4}, "cpus": 8.5, "memory": "0Gi", "jobs": 3.0},
    "weight": 2,
    "max_priority": 10,
}


async def test_a_platform_admin_sets_a_quota_the_team_and_the_scheduler_read(
    api: Harness,
) -> None:
    member = await api.add_user("member")
    team = await api.add_team("vision", {member: "member"})
    fresh = await member.client.get(f"/v2/teams/{team}/quota")
    assert fresh.status_code == 200, fresh.text
    assert fresh.json() == {
        "team": team,
        "gpus": None,
        "cpus": None,
        "memory": None,
        "jobs": None,
        "borrowing_limit": {"gpus": None, "cpus": None, "memory": None, "jobs": None},
        "weight": 1.0,
        "max_priority": 0,
    }

    put = await api.admin.put(f"/v2/teams/{team}/quota", json=FULL)
    assert put.status_code == 200, put.text
    shown = (await member.client.get(f"/v2/teams/{team}/quota")).json()
    assert shown == put.json()
    assert shown["memory"] == 64 * 2**30 and shown["cpus"] == 16.0
    borrowing = {"gpus": {"A100": 4}, "cpus": 8.5, "memory": 0, "jobs": 3}
    assert shown["borrowing_limit"] == borrowing
    assert (await member.client.get(f"/v2/teams/{team}")).json()["quota"] == shown

    async with api.app.state.dlaas.sessions() as session:
        [stored] = [q for q in await team_quotas(session) if q.team == team]
    assert stored.gpus == {"A100": 8, "T4": 2} and stored.borrow_gpus == {"A100": 4}
    assert (stored.millicpus, stored.borrow_millicpus) == (16_000, 8_500)
    assert (stored.memory, stored.borrow_memory, stored.jobs, stored.borrow_jobs) == (
        64 * 2**30,
        0,
        10,
        3,
    )
    assert (stored.weight, stored.max_priority) == (2.0, 10)

    # the quota as a whole: what a PUT leaves out is not limited again
    again = await api.admin.put(f"/v2/teams/{team}/quota", json={"jobs": 3, "memory": 1024})
    assert again.status_code == 200, again.text
    assert (again.json()["gpus"], again.json()["jobs"], again.json()["memory"]) == (None, 3, 1024)
    assert (again.json()["weight"], again.json()["max_priority"]) == (1.0, 0)


async def test_only_a_platform_admin_sets_a_quota(api: Harness) -> None:
    lead = await api.add_user("lead")
    team = await api.add_team("vision", {lead: "team_admin"})
    refused = await lead.client.put(f"/v2/teams/{team}/quota", json={"jobs": 100})
    assert refused.status_code == 403
    assert refused.json()["detail"] == "only a platform admin may set a team's quota"
    assert (await lead.client.get(f"/v2/teams/{team}/quota")).json()["jobs"] is None


@pytest.mark.parametrize(
    ("body", "field", "said"),
    [
        ({"cpus": -1}, "cpus", "greater than or equal to 0"),
        ({"cpus": "16"}, "cpus", "number"),
        ({"memory": "64Gx"}, "memory", "is not understood"),
        ({"memory": -5}, "memory", "more than 0 bytes"),
        ({"jobs": 1.5}, "jobs", "integer"),
        ({"gpus": {"A100": -1}}, "gpus.A100", "greater than or equal to 0"),
        ({"gpus": {"no such/gpu": 1}}, "gpus", "'no such/gpu' is not a GPU product"),
        ({"memory": "1.5 GiB"}, "memory", "is not understood"),
        ({"memory": "2000Ti"}, "memory", "is not understood"),
        ({"memory": 2**60}, "memory", "above the limit of 1 PiB"),
        ({"gpus": [8]}, "gpus", "dictionary"),
        ({"borrowing_limit": {"cpus": "lots"}}, "borrowing_limit.cpus", "number"),
        ({"borrowing_limit": {"weight": 2}}, "borrowing_limit.weight", "is not a field"),
        ({"weight": 0}, "weight", "greater than 0"),
        ({"max_priority": 1001}, "max_priority", "less than or equal to 1000"),
        ({"max_priority": -1}, "max_priority", "greater than or equal to 0"),
        ({"gpu": {"A100": 1}}, "gpu", "is not a field"),
    ],
)
async def test_bad_input_is_refused_naming_the_field(
    api: Harness, body: dict[str, Any], field: str, said: str
) -> None:
    team = await api.add_team("vision", {})
    answer = await api.admin.put(f"/v2/teams/{team}/quota", json=body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["field"].startswith(field), answer.json()
    assert said in answer.json()["detail"], answer.json()


def _with_priority(priority: int) -> bytes:
    return MANIFEST + f"priority: {priority}\n".encode()


async def test_a_priority_above_the_teams_max_is_refused_but_not_for_a_platform_admin(
    api: Harness,
) -> None:
    member = await api.add_user("member")
    team = await api.add_team("vision", {member: "member"})
    put = await api.admin.put(f"/v2/teams/{team}/quota", json={"max_priority": 10})
    assert put.status_code == 200, put.text

    refused = await submit(member.client, _with_priority(11), team=team)
    assert refused.status_code == 422, refused.text
    body = refused.json()
    assert body["field"] == "priority" and body["error"] == "priority_too_high"
    assert (
        f"team {team} may use priority up to 10; ask a platform admin to raise it"
        in (body["detail"])
    )

    for allowed in (10, 0, -50):
        answer = await submit(member.client, _with_priority(allowed), team=team)
        assert answer.status_code == 201, answer.text
        assert answer.json()["manifest"]["priority"] == allowed

    by_admin = await submit(api.admin, _with_priority(1000), team=team)
    assert by_admin.status_code == 201, by_admin.text
    assert by_admin.json()["manifest"]["priority"] == 1000


async def test_a_team_whose_max_priority_was_never_set_takes_priority_0_at_most(
    api: Harness,
) -> None:
    user = await api.add_user("solo")
    refused = await submit(user.client, _with_priority(1))
    assert refused.status_code == 422 and refused.json()["field"] == "priority"
    assert f"team {user.name} may use priority up to 0" in refused.json()["detail"]
    assert (await submit(user.client, _with_priority(0))).status_code == 201


@pytest.fixture(params=["sqlite", "postgres"])
async def api_with_t4s(
    request: pytest.FixtureRequest, tmp_path: Path, private_redis_url: str
) -> AsyncIterator[Harness]:
    """The API on a Redis database of its own, where a node of 4 T4 GPUs is published."""
    database_url = request.getfixturevalue(f"{request.param}_url")
    if request.param == "sqlite":
        database_url = f"sqlite+aiosqlite:///{tmp_path / 'api.db'}"
    async with running_api(database_url, private_redis_url, tmp_path / "objects") as harness:
        node = NodeCapacity("gpu", 4, "T4", millicpus=16_000, memory=64 * 2**30)
        await apublish_nodes(harness.app.state.dlaas.redis, [node])
        yield harness


def _gang(learners: int, asks: str) -> bytes:
    return (
        f"name: gang\nlearners: {learners}\n{asks}framework:\n  command: python train.py\n"
    ).encode()


@pytest.mark.parametrize(
    ("manifest", "field", "detail"),
    [
        (
            _gang(3, "gpus: 1\n"),
            "gpus",
            "3 learners need 3 GPUs at once, more than team {team} may ever use (2 T4: its "
            "quota plus its borrowing limit); ask for less, or a platform admin raises the "
            "team's quota (`dlaas team quota`)",
        ),
        (
            _gang(3, "gpus: 1\nelastic: {min_learners: 3, max_learners: 4}\n"),
            "gpus",
            "3 learners (elastic.min_learners) need 3 GPUs at once, more than team {team} may "
            "ever use (2 T4: its quota plus its borrowing limit); ask for less, or a platform "
            "admin raises the team's quota (`dlaas team quota`)",
        ),
        (
            _gang(2, "cpus: 3\n"),
            "cpus",
            "2 learners need 6 CPUs at once, more than team {team} may ever use (5 CPUs: its "
            "quota plus its borrowing limit); ask for less, or a platform admin raises the "
            "team's quota (`dlaas team quota`)",
        ),
        (
            _gang(2, "memory: 2Gi\n"),
            "memory",
            "2 learners need 4Gi of memory at once, more than team {team} may ever use (3Gi: "
            "its quota plus its borrowing limit); ask for less, or a platform admin raises the "
            "team's quota (`dlaas team quota`)",
        ),
    ],
    ids=["gpus", "elastic", "cpus", "memory"],
)
async def test_a_job_beyond_its_teams_quota_and_borrowing_is_refused_naming_the_field(
    api_with_t4s: Harness, manifest: bytes, field: str, detail: str
) -> None:
    api = api_with_t4s
    member = await api.add_user("member")
    team = await api.add_team("ta", {member: "member"})
    quota = {
        "gpus": {"T4": 1},
        "cpus": 4,
        "memory": "2Gi",
        "borrowing_limit": {"gpus": {"T4": 1}, "cpus": 1, "memory": "1Gi"},
    }
    assert (await api.admin.put(f"/v2/teams/{team}/quota", json=quota)).status_code == 200
    refused = await submit(member.client, manifest, team=team)
    assert refused.status_code == 422, refused.text
    assert refused.json() == {
        "error": "beyond_team_quota",
        "detail": detail.format(team=team),
        "field": field,
    }
    # within the quota plus borrowing the same team's job is taken
    assert (await submit(member.client, _gang(2, "gpus: 1\n"), team=team)).status_code == 201


async def test_a_team_that_may_run_no_job_refuses_submissions_and_unlimited_teams_take_any(
    api_with_t4s: Harness,
) -> None:
    api = api_with_t4s
    member = await api.add_user("member")
    closed = await api.add_team("closed", {member: "member"})
    open_team = await api.add_team("open", {member: "member"})
    quota = {"jobs": 0, "borrowing_limit": {"jobs": 0}}
    assert (await api.admin.put(f"/v2/teams/{closed}/quota", json=quota)).status_code == 200
    refused = await submit(member.client, _gang(1, ""), team=closed)
    assert refused.status_code == 422, refused.text
    assert refused.json()["field"] == "team"
    assert f"team {closed} may run no job at all" in refused.json()["detail"]

    # a team whose quota was never set is not limited: only the cluster bounds its jobs
    taken = await submit(member.client, _gang(4, "gpus: 1\n"), team=open_team)
    assert taken.status_code == 201, taken.text
