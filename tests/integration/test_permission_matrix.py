"""The permission table through the API, row by row: each endpoint asked by an outsider, a
viewer, a member and a team admin of a team, and by a platform admin of no team, on SQLite
and on PostgreSQL. What each should get is tests/permission_expectations.py, written out
apart from the table."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import httpx
import pytest

from api.permissions import PERMISSIONS, Decision
from tests.integration.api_harness import MANIFEST, ApiUser, Harness, submit
from tests.permission_expectations import CALLERS, EXPECTED, expected_decision


@dataclass
class World:
    """A team with one of each role, a job of it, and callers from outside it."""

    api: Harness
    team: str
    owner: ApiUser  # a member of the team, who submits its jobs
    job: str
    callers: dict[str, ApiUser]

    async def new_job(self, *, halted: bool = False) -> str:
        answer = await submit(self.owner.client, team=self.team)
        assert answer.status_code == 201, answer.text
        job_id = str(answer.json()["id"])
        if halted:
            assert (await self.owner.client.post(f"/v2/jobs/{job_id}/halt")).status_code == 202
        return job_id

    async def new_member(self, role: str = "viewer") -> str:
        user = await self.api.add_user("extra")
        added = await self.api.admin.post(
            f"/v2/teams/{self.team}/members", json={"user": user.name, "role": role}
        )
        assert added.status_code == 201, added.text
        return user.name


async def make_world(api: Harness) -> World:
    callers = {
        "outsider": await api.add_user("outsider"),
        "viewer": await api.add_user("viewer"),
        "member": await api.add_user("member"),
        "team admin": await api.add_user("lead"),
        "platform admin": await api.add_user("root", admin=True),
    }
    owner = await api.add_user("owner")
    roles = {"viewer": "viewer", "member": "member", "team admin": "team_admin"}
    members = {callers[kind]: role for kind, role in roles.items()} | {owner: "member"}
    team = await api.add_team("matrix", members)
    answer = await submit(owner.client, team=team)
    assert answer.status_code == 201, answer.text
    job = str(answer.json()["id"])
    objects = api.app.state.dlaas.objects
    objects.put_bytes(f"jobs/{job}/results/out.txt", b"result")
    objects.put_bytes(f"jobs/{job}/checkpoints/c1/COMMITTED", b"{}")
    return World(api, team, owner, job, callers)


def _unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


Ask = Callable[[World, httpx.AsyncClient], Awaitable[httpx.Response]]
T = TypeVar("T")


async def _revoke_own(w: World, c: httpx.AsyncClient) -> httpx.Response:
    name = _unique("spare")
    assert (await c.post("/v2/tokens", json={"name": name})).status_code == 201
    return await c.delete(f"/v2/tokens/{name}")


async def _revoke_anothers(w: World, c: httpx.AsyncClient) -> httpx.Response:
    victim = await w.api.add_user("victim")
    return await c.delete(f"/v2/users/{victim.name}/tokens/default")


# endpoint -> (how a caller asks it, the status it answers when it lets them through)
REQUESTS: dict[str, tuple[Ask, int | dict[str, int]]] = {
    "POST /v2/jobs": (lambda w, c: submit(c, team=w.team), 201),
    "GET /v2/jobs": (lambda w, c: c.get("/v2/jobs"), 200),
    "GET /v2/jobs/{job_id}": (lambda w, c: c.get(f"/v2/jobs/{w.job}"), 200),
    "GET /v2/jobs/{job_id}/events": (lambda w, c: c.get(f"/v2/jobs/{w.job}/events"), 200),
    "GET /v2/jobs/{job_id}/logs": (lambda w, c: c.get(f"/v2/jobs/{w.job}/logs"), 200),
    "GET /v2/jobs/{job_id}/metrics": (lambda w, c: c.get(f"/v2/jobs/{w.job}/metrics"), 200),
    "GET /v2/jobs/{job_id}/results": (lambda w, c: c.get(f"/v2/jobs/{w.job}/results"), 200),
    "GET /v2/jobs/{job_id}/results/{path}": (
        lambda w, c: c.get(f"/v2/jobs/{w.job}/results/out.txt"),
        200,
    ),
    "GET /v2/jobs/{job_id}/checkpoints": (
        lambda w, c: c.get(f"/v2/jobs/{w.job}/checkpoints"),
        200,
    ),
    "GET /v2/jobs/{job_id}/checkpoints/{path}": (
        lambda w, c: c.get(f"/v2/jobs/{w.job}/checkpoints/c1/COMMITTED"),
        200,
    ),
    "POST /v2/jobs/{job_id}/halt": (
        lambda w, c: _then(w.new_job(), lambda job: c.post(f"/v2/jobs/{job}/halt")),
        202,
    ),
    "POST /v2/jobs/{job_id}/resume": (
        lambda w, c: _then(w.new_job(halted=True), lambda job: c.post(f"/v2/jobs/{job}/resume")),
        202,
    ),
    "DELETE /v2/jobs/{job_id}": (
        lambda w, c: _then(w.new_job(), lambda job: c.delete(f"/v2/jobs/{job}")),
        202,
    ),
    "POST /v2/teams": (lambda w, c: c.post("/v2/teams", json={"name": _unique("t")}), 201),
    "GET /v2/teams": (lambda w, c: c.get("/v2/teams"), 200),
    "GET /v2/teams/{team}": (lambda w, c: c.get(f"/v2/teams/{w.team}"), 200),
    "GET /v2/teams/{team}/members": (lambda w, c: c.get(f"/v2/teams/{w.team}/members"), 200),
    "POST /v2/teams/{team}/members": (
        lambda w, c: _then(
            w.api.add_user("joiner"),
            lambda u: c.post(f"/v2/teams/{w.team}/members", json={"user": u.name}),
        ),
        {"team admin": 202, "platform admin": 201},  # a team admin invites
    ),
    "PATCH /v2/teams/{team}/members/{user}": (
        lambda w, c: _then(
            w.new_member(),
            lambda name: c.patch(f"/v2/teams/{w.team}/members/{name}", json={"role": "member"}),
        ),
        200,
    ),
    "DELETE /v2/teams/{team}/members/{user}": (
        lambda w, c: _then(
            w.new_member(), lambda name: c.delete(f"/v2/teams/{w.team}/members/{name}")
        ),
        204,
    ),
    "GET /v2/invitations": (lambda w, c: c.get("/v2/invitations"), 200),
    "POST /v2/invitations/{team}": (
        lambda w, c: _then(_invited(w, c), lambda team: c.post(f"/v2/invitations/{team}")),
        201,
    ),
    "DELETE /v2/invitations/{team}": (
        lambda w, c: _then(_invited(w, c), lambda team: c.delete(f"/v2/invitations/{team}")),
        204,
    ),
    "GET /v2/teams/{team}/quota": (lambda w, c: c.get(f"/v2/teams/{w.team}/quota"), 200),
    "PUT /v2/teams/{team}/quota": (
        lambda w, c: c.put(f"/v2/teams/{w.team}/quota", json={"gpus": {"A100": 2}}),
        200,
    ),
    "POST /v2/users": (lambda w, c: c.post("/v2/users", json={"name": _unique("u")}), 201),
    "GET /v2/users": (lambda w, c: c.get("/v2/users"), 200),
    "GET /v2/users/me": (lambda w, c: c.get("/v2/users/me"), 200),
    "GET /v2/users/{user}/tokens": (
        lambda w, c: c.get(f"/v2/users/{w.owner.name}/tokens"),
        200,
    ),
    "DELETE /v2/users/{user}/tokens/{name_or_id}": (_revoke_anothers, 200),
    "POST /v2/tokens": (lambda w, c: c.post("/v2/tokens", json={"name": _unique("t")}), 201),
    "GET /v2/tokens": (lambda w, c: c.get("/v2/tokens"), 200),
    "DELETE /v2/tokens/{name_or_id}": (_revoke_own, 200),
    "PUT /v2/data/{container}/{path}": (
        lambda w, c: c.put("/v2/data/box/a.txt", content=b"a"),
        201,
    ),
    "GET /v2/data/{container}": (lambda w, c: c.get("/v2/data/box"), 200),
    "GET /v2/usage": (lambda w, c: c.get("/v2/usage"), 200),
    "GET /v2/cluster": (lambda w, c: c.get("/v2/cluster"), 200),
    "GET /v2/queue": (lambda w, c: c.get("/v2/queue"), 200),
    "POST /v2/plan": (
        lambda w, c: c.post(
            "/v2/plan",
            content=MANIFEST + b"performance: {sample_seconds: 0.01, batch_size: 64}\n",
            headers={"content-type": "application/yaml"},
        ),
        200,
    ),
}


async def _then(
    first: Awaitable[T], then: Callable[[T], Awaitable[httpx.Response]]
) -> httpx.Response:
    return await then(await first)


def test_every_row_of_the_table_is_asked() -> None:
    assert set(REQUESTS) == set(PERMISSIONS) == set(EXPECTED)


async def _invited(world: World, client: httpx.AsyncClient) -> str:
    """A new team whose team admin invited the caller into it."""
    me = (await client.get("/v2/users/me")).json()["name"]
    inviter = await world.api.add_user("inviter")
    team = await world.api.add_team("invites", {inviter: "team_admin"})
    invited = await inviter.client.post(f"/v2/teams/{team}/members", json={"user": me})
    assert invited.status_code == 202, invited.text
    return team


def _expected_status(endpoint: str, decision: Decision, kind: str) -> int:
    if decision is Decision.ALLOW:
        status = REQUESTS[endpoint][1]
        return status[kind] if isinstance(status, dict) else status
    if decision is Decision.REFUSE:
        return 403
    return 404


@pytest.mark.parametrize("endpoint", sorted(PERMISSIONS))
async def test_each_caller_gets_what_the_row_says(api: Harness, endpoint: str) -> None:
    world = await make_world(api)
    ask, _ = REQUESTS[endpoint]
    got = {}
    wanted = {}
    for kind in CALLERS:
        answer = await ask(world, world.callers[kind].client)
        got[kind] = answer.status_code
        wanted[kind] = _expected_status(
            endpoint, expected_decision(*EXPECTED[endpoint], kind), kind
        )
        if answer.status_code in (403, 404, 422):
            body = answer.json()
            assert body["error"] and body["detail"] and body.get("field"), body
    assert got == wanted, endpoint
