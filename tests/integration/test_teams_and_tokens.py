"""Teams, roles and tokens through the API: who sees which job, what a viewer may do, how
a submission picks its team, and named tokens that expire and are revoked."""

from __future__ import annotations

import asyncio
import secrets
import time
from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy import select, update

from api.auth import CACHE_TTL_S, TokenCache
from storage.api_tokens import LAST_USED_RESOLUTION
from storage.models import ApiToken, User, utcnow
from tests.integration.api_harness import Harness, submit


async def test_another_teams_job_is_a_404_like_a_job_that_does_not_exist(api: Harness) -> None:
    alice, bob = await api.add_user("alice"), await api.add_user("bob")
    job = (await submit(alice.client)).json()
    assert job["team"] == alice.name and job["owner"] == alice.name
    theirs = await bob.client.get(f"/v2/jobs/{job['id']}")
    missing = await bob.client.get("/v2/jobs/training-nosuchjob2")
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json()["detail"].replace(job["id"], "X") == missing.json()["detail"].replace(
        "training-nosuchjob2", "X"
    )
    assert (await bob.client.post(f"/v2/jobs/{job['id']}/halt")).status_code == 404
    assert (await bob.client.get("/v2/jobs")).json()["jobs"] == []


async def test_a_viewer_reads_the_teams_jobs_but_cannot_halt_them(api: Harness) -> None:
    owner, viewer = await api.add_user("owner"), await api.add_user("viewer")
    team = await api.add_team("vision", {owner: "member", viewer: "viewer"})
    job = (await submit(owner.client, team=team)).json()
    assert job["team"] == team
    read = await viewer.client.get(f"/v2/jobs/{job['id']}")
    assert read.status_code == 200 and read.json()["owner"] == owner.name
    listed = (await viewer.client.get("/v2/jobs", params={"team": team})).json()["jobs"]
    assert [j["id"] for j in listed] == [job["id"]]
    halt = await viewer.client.post(f"/v2/jobs/{job['id']}/halt")
    assert halt.status_code == 403
    assert f"you are a viewer of team {team}" in halt.json()["detail"]
    assert "member or above may halt" in halt.json()["detail"]
    refused = await submit(viewer.client, team=team)
    assert refused.status_code == 403 and refused.json()["field"] == "team"


async def test_a_platform_admin_lists_every_teams_jobs(api: Harness) -> None:
    alice = await api.add_user("alice")
    job_id = (await submit(alice.client)).json()["id"]
    everyone = (await api.admin.get("/v2/jobs", params={"owner": alice.name})).json()["jobs"]
    assert [j["id"] for j in everyone] == [job_id]


async def test_a_submission_names_a_team_it_may_submit_to(api: Harness) -> None:
    alice = await api.add_user("alice")
    unknown = await submit(alice.client, team="no-such-team")
    assert unknown.status_code == 404
    assert unknown.json()["field"] == "team" and unknown.json()["error"] == "unknown_team"
    bad = await submit(alice.client, team="Not A Name")
    assert bad.status_code == 422 and bad.json()["field"] == "team"


async def test_membership_rules(api: Harness) -> None:
    lead, joiner = await api.add_user("lead"), await api.add_user("joiner")
    team = await api.add_team("ml", {lead: "team_admin"})
    members = f"/v2/teams/{team}/members"
    invited = await lead.client.post(members, json={"user": joiner.name})
    assert invited.status_code == 202 and invited.json()["invited"] is True
    assert (await joiner.client.post(f"/v2/invitations/{team}")).status_code == 201
    again = await lead.client.post(members, json={"user": joiner.name})
    assert again.status_code == 409 and again.json()["field"] == "user"
    nobody = await api.admin.post(members, json={"user": "nobody-here"})
    assert nobody.status_code == 404 and nobody.json()["field"] == "user"
    bad_role = await lead.client.patch(f"{members}/{joiner.name}", json={"role": "owner"})
    assert bad_role.status_code == 422 and bad_role.json()["field"] == "role"
    last = await lead.client.patch(f"{members}/{lead.name}", json={"role": "member"})
    assert last.status_code == 409 and last.json()["error"] == "last_team_admin"
    assert (await lead.client.delete(f"{members}/{lead.name}")).status_code == 409
    # what a token stands for is cached for up to CACHE_TTL_S: the new member's role counts
    # within that
    listed = (await _answered_within(joiner.client, members, 1.0)).json()["members"]
    assert {(m["user"], m["role"]) for m in listed} == {
        (lead.name, "team_admin"),
        (joiner.name, "member"),
    }
    shown = (await joiner.client.get(f"/v2/teams/{team}")).json()
    assert shown == {**shown, "name": team, "members": 2, "role": "member", "personal": False}
    taken = await api.admin.post("/v2/teams", json={"name": lead.name})
    assert taken.status_code == 409 and taken.json()["field"] == "name"


async def test_teams_and_users_are_paged_by_cursor(api: Harness) -> None:
    lead = await api.add_user("pager")
    for n in range(3):
        await api.add_team(f"paged{n}", {lead: "viewer"})
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = (await lead.client.get("/v2/teams", params=params)).json()
        seen += [team["name"] for team in page["teams"]]
        cursor = page["next"]
        if cursor is None:
            break
    assert len(seen) == 4 and seen == sorted(seen) and lead.name in seen
    users = (await api.admin.get("/v2/users", params={"limit": 1})).json()
    assert len(users["users"]) == 1 and users["next"]
    twice = await lead.client.get("/v2/teams", params=[("limit", "1"), ("limit", "5")])
    assert twice.status_code == 422 and twice.json()["field"] == "limit"


async def _answered_within(client: httpx.AsyncClient, path: str, seconds: float) -> httpx.Response:
    """GET `path` until it is answered 200; the last answer after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        answer = await client.get(path)
        if answer.status_code == 200 or time.monotonic() > deadline:
            return answer
        await asyncio.sleep(0.02)


async def _refused_within(client: httpx.AsyncClient, seconds: float) -> httpx.Response:
    """Ask with the token until it is refused; fail if that takes longer than `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        answer = await client.get("/v2/users/me")
        if answer.status_code == 401 or time.monotonic() > deadline:
            return answer
        await asyncio.sleep(0.02)


async def test_a_named_token_is_shown_once_and_revoked_at_once(api: Harness) -> None:
    alice = await api.add_user("alice")
    made = await alice.client.post("/v2/tokens", json={"name": "laptop"})
    assert made.status_code == 201
    secret = made.json()["token"]
    dup = await alice.client.post("/v2/tokens", json={"name": "laptop"})
    assert dup.status_code == 409 and dup.json()["field"] == "name"
    listed = (await alice.client.get("/v2/tokens")).json()["tokens"]
    assert [t["name"] for t in listed] == ["default", "laptop"]
    assert all("token" not in t for t in listed)
    async with api.client(secret) as laptop:
        assert (await laptop.get("/v2/users/me")).json()["name"] == alice.name
        used = (await alice.client.get("/v2/tokens")).json()["tokens"]
        assert used[1]["last_used_at"] is not None
        assert (await alice.client.delete("/v2/tokens/laptop")).status_code == 200
        revoked_at = time.monotonic()
        refused = await _refused_within(laptop, 1.0)
        assert refused.status_code == 401, f"still served {time.monotonic() - revoked_at:.2f}s"
        assert refused.json()["error"] == "token_revoked"
        assert "revoked at" in refused.json()["detail"]
    assert (await alice.client.delete("/v2/tokens/laptop")).status_code == 404


async def test_an_expired_token_is_refused_saying_so(api: Harness) -> None:
    alice = await api.add_user("alice")
    made = (await alice.client.post("/v2/tokens", json={"name": "brief", "expires_in": 1})).json()
    assert made["expires_at"] is not None
    async with api.client(made["token"]) as brief:
        refused = await _refused_within(brief, 5.0)
    assert refused.status_code == 401 and refused.json()["error"] == "token_expired"
    assert "expired at" in refused.json()["detail"]
    assert "dlaas token create" in refused.json()["detail"]
    bad = await alice.client.post("/v2/tokens", json={"name": "x", "expires_in": 0})
    assert bad.status_code == 422 and bad.json()["field"] == "expires_in"
    for refused in (1.5, "60"):
        answer = await alice.client.post("/v2/tokens", json={"name": "y", "expires_in": refused})
        assert answer.status_code == 422 and answer.json()["field"] == "expires_in"
    whole = await alice.client.post("/v2/tokens", json={"name": "z", "expires_in": 60.0})
    assert whole.status_code == 201
    far = await alice.client.delete("/v2/tokens/9999999999")
    assert far.status_code == 404 and far.json()["field"] == "name_or_id"


async def test_nobody_revokes_their_own_last_working_token(api: Harness) -> None:
    alice = await api.add_user("alice")
    last = await alice.client.delete("/v2/tokens/default")
    assert last.status_code == 409 and last.json()["error"] == "last_token"
    assert last.json()["field"] == "name_or_id" and "dlaas token create" in last.json()["detail"]
    assert (await alice.client.get("/v2/users/me")).status_code == 200
    # An expired token does not count as another way in.
    brief = await alice.client.post("/v2/tokens", json={"name": "brief", "expires_in": 1})
    async with api.client(brief.json()["token"]) as expiring:
        assert (await _refused_within(expiring, 5.0)).json()["error"] == "token_expired"
    assert (await alice.client.delete("/v2/tokens/default")).status_code == 409
    made = (await alice.client.post("/v2/tokens", json={"name": "laptop"})).json()
    assert (await alice.client.delete("/v2/tokens/default")).status_code == 200
    async with api.client(made["token"]) as laptop:
        assert (await laptop.delete("/v2/tokens/laptop")).status_code == 409
        assert (await laptop.get("/v2/users/me")).json()["name"] == alice.name


async def test_a_platform_admin_revokes_anyones_token_and_only_they_do(api: Harness) -> None:
    alice, bob = await api.add_user("alice"), await api.add_user("bob")
    denied = await bob.client.delete(f"/v2/users/{alice.name}/tokens/default")
    assert denied.status_code == 403 and "platform admin" in denied.json()["detail"]
    tokens = (await api.admin.get(f"/v2/users/{alice.name}/tokens")).json()["tokens"]
    by_id = await api.admin.delete(f"/v2/users/{alice.name}/tokens/{tokens[0]['id']}")
    assert by_id.status_code == 200 and by_id.json()["name"] == "default"
    assert (await _refused_within(alice.client, 1.0)).status_code == 401
    assert CACHE_TTL_S <= 1.0


async def test_a_tokens_last_use_is_written_again_once_it_is_a_minute_old(api: Harness) -> None:
    alice = await api.add_user("alice")
    assert (await alice.client.get("/v2/users/me")).status_code == 200
    state = api.app.state.dlaas
    long_ago = utcnow() - LAST_USED_RESOLUTION - timedelta(seconds=5)
    async with state.sessions() as session:
        await session.execute(
            update(ApiToken)
            .where(
                ApiToken.user_id == select(User.id).where(User.name == alice.name).scalar_subquery()
            )
            .values(last_used_at=long_ago)
        )
        await session.commit()
    state.tokens = TokenCache()  # the next request looks the token up again
    assert (await alice.client.get("/v2/users/me")).status_code == 200
    [token] = (await alice.client.get("/v2/tokens")).json()["tokens"]
    last_used = datetime.fromisoformat(token["last_used_at"])
    if last_used.tzinfo is None:
        last_used = last_used.replace(tzinfo=UTC)
    assert last_used > long_ago + timedelta(seconds=4)


def _moment(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


async def test_a_token_that_expires_mints_none_that_outlives_it(api: Harness) -> None:
    # The admin's tokens outlive the test on PostgreSQL: their names are new each run.
    brief = await api.admin.post(
        "/v2/tokens", json={"name": f"brief-{secrets.token_hex(4)}", "expires_in": 3600}
    )
    assert brief.status_code == 201
    ends = _moment(brief.json()["expires_at"])
    async with api.client(brief.json()["token"]) as expiring:
        forever = await expiring.post("/v2/tokens", json={"name": "forever"})
        longer = await expiring.post("/v2/tokens", json={"name": "longer", "expires_in": 7200})
        shorter = await expiring.post("/v2/tokens", json={"name": "shorter", "expires_in": 60})
        for made in (forever, longer):
            assert made.status_code == 201 and _moment(made.json()["expires_at"]) == ends
        assert shorter.status_code == 201 and _moment(shorter.json()["expires_at"]) < ends
        unique = f"minted-{secrets.token_hex(4)}"
        assert (await expiring.post("/v2/users", json={"name": unique})).status_code == 201
    [default] = (await api.admin.get(f"/v2/users/{unique}/tokens")).json()["tokens"]
    assert default["expires_at"] is not None and _moment(default["expires_at"]) == ends
    # A token that never expires mints as asked.
    lasting = await api.admin.post("/v2/tokens", json={"name": f"lasting-{secrets.token_hex(4)}"})
    assert lasting.status_code == 201 and lasting.json()["expires_at"] is None


async def test_a_v2_body_with_an_unknown_field_is_refused_naming_it(api: Harness) -> None:
    alice = await api.add_user("alice")
    typo = await alice.client.post("/v2/tokens", json={"name": "typo", "expires_in_s": 60})
    assert typo.status_code == 422 and typo.json()["field"] == "expires_in_s"
    assert "expires_in_s: is not a field of this request" in typo.json()["detail"]
    names = [t["name"] for t in (await alice.client.get("/v2/tokens")).json()["tokens"]]
    assert names == ["default"]
    team = await api.add_team("strict", {alice: "team_admin"})
    for path, body in (
        ("/v2/users", {"name": f"u-{secrets.token_hex(4)}", "admin": False, "team": "x"}),
        ("/v2/teams", {"name": f"t-{secrets.token_hex(4)}", "quota": 1}),
        (f"/v2/teams/{team}/members", {"user": alice.name, "roles": "viewer"}),
    ):
        refused = await api.admin.post(path, json=body)
        extra = next(key for key in body if key not in ("name", "admin", "user"))
        assert refused.status_code == 422, (path, refused.text)
        assert refused.json()["field"] == extra, (path, refused.text)
    role = await api.admin.patch(
        f"/v2/teams/{team}/members/{alice.name}", json={"role": "team_admin", "why": "x"}
    )
    assert role.status_code == 422 and role.json()["field"] == "why"


async def test_a_team_admin_invites_and_only_the_invitee_makes_themself_a_member(
    api: Harness,
) -> None:
    lead, bob, eve = (
        await api.add_user("lead"),
        await api.add_user("bob"),
        await api.add_user("eve"),
    )
    team = await api.add_team("invites", {lead: "team_admin"})
    members = f"/v2/teams/{team}/members"
    known = await lead.client.post(members, json={"user": bob.name, "role": "viewer"})
    unknown_name = f"nobody-{secrets.token_hex(4)}"
    unknown = await lead.client.post(members, json={"user": unknown_name, "role": "viewer"})
    # whether a user of that name exists, the answer is the same but for the name
    assert known.status_code == unknown.status_code == 202
    assert known.json() == {**unknown.json(), "user": bob.name}
    assert known.json() == {"user": bob.name, "role": "viewer", "invited": True}
    listed = (await lead.client.get(members)).json()["members"]
    assert [m["user"] for m in listed] == [lead.name]  # nobody joined without saying yes
    assert (await eve.client.post(f"/v2/invitations/{team}")).status_code == 404
    assert (await eve.client.get("/v2/invitations")).json() == {"invitations": []}
    [offer] = (await bob.client.get("/v2/invitations")).json()["invitations"]
    assert (offer["team"], offer["role"]) == (team, "viewer")
    # asked again with another role, the invitation offers that one
    await lead.client.post(members, json={"user": bob.name, "role": "member"})
    joined = await bob.client.post(f"/v2/invitations/{team}")
    assert joined.status_code == 201 and joined.json() == {"user": bob.name, "role": "member"}
    assert (await bob.client.post(f"/v2/invitations/{team}")).status_code == 404
    listed = (await lead.client.get(members)).json()["members"]
    assert {m["user"]: m["role"] for m in listed} == {lead.name: "team_admin", bob.name: "member"}
    # declined, an invitation is gone and nobody joined
    assert (await lead.client.post(members, json={"user": eve.name})).status_code == 202
    assert (await eve.client.delete(f"/v2/invitations/{team}")).status_code == 204
    assert (await eve.client.post(f"/v2/invitations/{team}")).status_code == 404
    assert eve.name not in [m["user"] for m in (await lead.client.get(members)).json()["members"]]
