"""Every list of the API is paged by cursor: jobs (with filters), events, results, data.

Against a real database (SQLite and PostgreSQL) and both object stores (local files, S3).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession

from api.pagination import encode_cursor
from storage import jobs as repo
from storage.db import make_engine, make_sessionmaker
from storage.job_states import JobState
from storage.models import Job
from storage.training_data import data_prefix
from storage.users import user_by_name
from tests.integration.api_harness import Harness, submit

BASE_TIME = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


@asynccontextmanager
async def _session(api: Harness) -> AsyncIterator[AsyncSession]:
    engine = make_engine(api.settings.database_url)
    try:
        async with make_sessionmaker(engine)() as session:
            yield session
    finally:
        await engine.dispose()


async def _new_user(api: Harness, name: str) -> tuple[httpx.AsyncClient, str, int]:
    """A client for a new user, with the user's name and id."""
    unique = f"{name}-{secrets.token_hex(4)}"
    created = await api.admin.post("/v2/users", json={"name": unique})
    assert created.status_code == 201, created.text
    async with _session(api) as session:
        user = await user_by_name(session, unique)
    assert user is not None
    return api.client(created.json()["token"]), unique, user.id


async def _add_jobs(
    api: Harness, owner_id: int, count: int, *, per_instant: int = 10, **fields: Any
) -> list[str]:
    """`count` jobs, `per_instant` of them created in the same microsecond."""
    ids: list[str] = []
    async with _session(api) as session:
        for n in range(count):
            job = await repo.create_job(
                session,
                owner_id=owner_id,
                name=fields.get("name", "sweep"),
                learners=1,
                manifest={},
            )
            job.created_at = BASE_TIME + timedelta(seconds=n // per_instant)
            if "state" in fields:
                job.state = fields["state"]
            ids.append(job.id)
        await session.commit()
    return ids


async def _newest_first(api: Harness, ids: list[str]) -> list[str]:
    async with _session(api) as session:
        found = (await session.execute(select(Job).where(Job.id.in_(ids)))).scalars().all()
    assert len(found) == len(ids)
    return [job.id for job in sorted(found, key=lambda j: (j.created_at, j.id), reverse=True)]


async def _every_page(
    client: httpx.AsyncClient, path: str, key: str, **params: Any
) -> tuple[list[Any], int]:
    """Every item of a list, following `next`, and how many pages it took."""
    items: list[Any] = []
    cursor: str | None = None
    pages = 0
    while True:
        answer = await client.get(path, params={**params, **({"cursor": cursor} if cursor else {})})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        items += body[key]
        pages += 1
        cursor = body["next"]
        if cursor is None:
            return items, pages
        assert body[key], "a page that says more follow holds something"


# -- jobs ------------------------------------------------------------------------------------


async def test_every_job_is_listed_once_across_pages_even_those_made_in_one_instant(
    api: Harness,
) -> None:
    alice, _, alice_id = await _new_user(api, "alice")
    async with alice:
        ids = await _add_jobs(api, alice_id, 263)
        expected = await _newest_first(api, ids)

        first = (await alice.get("/v2/jobs")).json()
        assert [j["id"] for j in first["jobs"]] == expected[:100]
        assert first["next"]

        for limit in (7, 10, 100, 1000):
            listed, pages = await _every_page(alice, "/v2/jobs", "jobs", limit=limit)
            assert [j["id"] for j in listed] == expected, limit
            assert pages == -(-len(ids) // limit)


async def test_a_jobs_list_filters_by_state_name_and_creation_time(api: Harness) -> None:
    alice, _, alice_id = await _new_user(api, "alice")
    async with alice:
        running = await _add_jobs(api, alice_id, 30, name="Digits-Big", state="RUNNING")
        failed = await _add_jobs(api, alice_id, 25, name="digits_small", state="FAILED")
        queued = await _add_jobs(api, alice_id, 20, name="100%_mnist")

        async def ids(**params: Any) -> set[str]:
            listed, _ = await _every_page(alice, "/v2/jobs", "jobs", limit=9, **params)
            assert len(listed) == len({j["id"] for j in listed})
            return {j["id"] for j in listed}

        assert await ids(state="RUNNING") == set(running)
        assert await ids(state=["RUNNING", "FAILED"]) == set(running + failed)
        assert await ids(state="COMPLETED") == set()
        assert await ids(name="DIGITS") == set(running + failed)
        assert await ids(name="digits_") == set(failed)  # `_` is a character, not a wildcard
        assert await ids(name="%") == set(queued)
        assert await ids(name="digits", state="FAILED") == set(failed)
        # Each batch has 10 jobs at BASE_TIME, 10 a second later, the rest 2 s later.
        cut = BASE_TIME + timedelta(seconds=1.5)
        early = await ids(created_before=cut.isoformat())
        assert early == set(running[:20] + failed[:20] + queued[:20])
        assert await ids(created_after=cut.isoformat()) == set(running[20:] + failed[20:])
        assert await ids(created_after=cut.isoformat(), state="FAILED") == set(failed[20:])
        in_paris = cut.astimezone(timezone(timedelta(hours=1))).isoformat()
        assert await ids(created_before=in_paris) == early
        # a time without a zone is UTC
        assert await ids(created_before=cut.replace(tzinfo=None).isoformat()) == early


async def test_a_cursor_goes_on_from_its_position_under_whatever_filters_come_with_it(
    api: Harness,
) -> None:
    alice, _, alice_id = await _new_user(api, "alice")
    async with alice:
        queued = await _add_jobs(api, alice_id, 40, per_instant=80)
        failed = await _add_jobs(api, alice_id, 40, per_instant=80, state="FAILED")
        every = await _newest_first(api, queued + failed)
        first = (await alice.get("/v2/jobs", params={"limit": 15, "state": "QUEUED"})).json()
        shown = [j["id"] for j in first["jobs"]]
        assert shown == [i for i in every if i in set(queued)][:15]
        rest = await alice.get("/v2/jobs", params={"cursor": first["next"], "limit": 100})
        assert [j["id"] for j in rest.json()["jobs"]] == every[every.index(shown[-1]) + 1 :]
        assert rest.json()["next"] is None


async def test_owner_lists_another_users_jobs_for_admins_only(api: Harness) -> None:
    alice, alice_name, alice_id = await _new_user(api, "alice")
    bob, bob_name, bob_id = await _new_user(api, "bob")
    async with alice, bob:
        alice_jobs = await _add_jobs(api, alice_id, 3)
        await _add_jobs(api, bob_id, 2)
        as_admin = (await api.admin.get("/v2/jobs", params={"owner": alice_name})).json()
        assert {j["id"] for j in as_admin["jobs"]} == set(alice_jobs)
        assert {j["owner"] for j in as_admin["jobs"]} == {alice_name}
        as_bob = await bob.get("/v2/jobs", params={"owner": alice_name})
        assert as_bob.json() == {"jobs": [], "next": None}
        own = await bob.get("/v2/jobs", params={"owner": bob_name})
        assert len(own.json()["jobs"]) == 2
        nobody = await api.admin.get("/v2/jobs", params={"owner": "no-such-user"})
        assert nobody.json() == {"jobs": [], "next": None}


async def test_deleted_jobs_are_not_listed(api: Harness) -> None:
    alice, _, alice_id = await _new_user(api, "alice")
    async with alice:
        kept, gone = await _add_jobs(api, alice_id, 2)
        assert (await alice.delete(f"/v2/jobs/{gone}")).status_code == 202
        listed, _ = await _every_page(alice, "/v2/jobs", "jobs", limit=1)
        assert [j["id"] for j in listed] == [kept]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"limit": "+1"}, "limit"),
        ({"limit": " 1"}, "limit"),
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"cursor": ""}, "cursor"),
        ({"cursor": "x" * 3000}, "cursor"),
        ({"cursor": encode_cursor("events", 12)}, "cursor"),
        ({"cursor": encode_cursor("jobs", "yesterday", "training-x")}, "cursor"),
        ({"cursor": encode_cursor("jobs", "2026-01-01T00:00:00", "training-x")}, "cursor"),
        ({"state": "SLEEPING"}, "state"),
        ({"state": ["RUNNING", "running"]}, "state"),
        ({"created_before": "last tuesday"}, "created_before"),
        ({"created_after": "2026-13-01"}, "created_after"),
        ({"name": "x" * 101}, "name"),
    ],
)
async def test_a_bad_page_or_filter_is_refused_naming_the_field(
    api: Harness, params: dict[str, Any], field: str
) -> None:
    response = await api.admin.get("/v2/jobs", params=params)
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["field"] == field, body
    assert body["detail"]


async def test_an_altered_cursor_is_refused(api: Harness) -> None:
    alice, _, alice_id = await _new_user(api, "alice")
    async with alice:
        await _add_jobs(api, alice_id, 3)
        cursor = (await alice.get("/v2/jobs", params={"limit": 1})).json()["next"]
        for altered in (cursor[:-1], cursor + "A", cursor[:10] + cursor[11:], cursor[::-1]):
            if altered == cursor:
                continue
            response = await alice.get("/v2/jobs", params={"cursor": altered})
            assert response.status_code == 422, (altered, response.text)
            assert response.json()["field"] == "cursor"
        # each character changed in turn
        for at in range(len(cursor)):
            swapped = cursor[:at] + ("B" if cursor[at] != "B" else "C") + cursor[at + 1 :]
            response = await alice.get("/v2/jobs", params={"cursor": swapped})
            assert response.status_code == 422, (at, response.text)


async def test_the_openapi_states_the_limits_and_the_states(api: Harness) -> None:
    spec = (await api.admin.get("/openapi.json")).json()
    parameters = {p["name"]: p["schema"] for p in spec["paths"]["/v2/jobs"]["get"]["parameters"]}
    assert parameters["limit"]["minimum"] == 1
    assert parameters["limit"]["maximum"] == 1000
    assert parameters["limit"]["default"] == 100
    assert set(parameters["state"]["items"]["enum"]) == {s.value for s in JobState}
    for path in ("/v2/jobs/{job_id}/events", "/v2/jobs/{job_id}/results", "/v2/data/{container}"):
        names = {p["name"] for p in spec["paths"][path]["get"]["parameters"]}
        assert {"limit", "cursor"} <= names, path


@pytest.mark.parametrize("api", ["postgres"], indirect=True)  # the plan asked of is PostgreSQL's
async def test_the_job_list_and_events_queries_walk_an_index(api: Harness) -> None:
    """No sort of a whole list per page: PostgreSQL can read each page off an index (asked
    to avoid sorting; on a test's few rows it would rather sort than walk an index)."""
    assert api.settings.database_url.startswith("postgresql")
    async with _session(api) as session:
        await session.execute(text("SET enable_seqscan = off"))
        await session.execute(text("SET enable_sort = off"))
        jobs_plan = await session.execute(
            text(
                "EXPLAIN SELECT * FROM jobs WHERE owner_id = 1 AND deleted_at IS NULL"
                " AND (created_at, id) < (now(), 'training-x'::varchar)"
                " ORDER BY created_at DESC, id DESC LIMIT 101"
            )
        )
        events_plan = await session.execute(
            text(
                "EXPLAIN SELECT * FROM job_events WHERE job_id = 'training-x' AND id > 5"
                " ORDER BY id LIMIT 101"
            )
        )
    jobs_lines = "\n".join(row[0] for row in jobs_plan)
    events_lines = "\n".join(row[0] for row in events_plan)
    assert "ix_jobs_owner_created_id" in jobs_lines and "Sort" not in jobs_lines, jobs_lines
    assert "ix_job_events_job_id_id" in events_lines and "Sort" not in events_lines


# -- events ----------------------------------------------------------------------------------


async def test_a_jobs_events_are_listed_once_across_pages(api: Harness) -> None:
    alice, _, _ = await _new_user(api, "alice")
    async with alice:
        job_id = (await submit(alice)).json()["id"]
        async with _session(api) as session:
            for n in range(254):
                await repo.add_event(session, job_id, "note", f"event {n}")
            await session.commit()
        listed, pages = await _every_page(alice, f"/v2/jobs/{job_id}/events", "events", limit=50)
        assert [e["reason"] for e in listed] == ["job submitted"] + [
            f"event {n}" for n in range(254)
        ]
        assert pages == 6
        first = (await alice.get(f"/v2/jobs/{job_id}/events")).json()
        assert len(first["events"]) == 100
        for params, field in [
            ({"limit": 0}, "limit"),
            ({"limit": 5000}, "limit"),
            ({"cursor": "garbage"}, "cursor"),
            ({"cursor": encode_cursor("events", "12")}, "cursor"),
            ({"cursor": encode_cursor("jobs", "2026-01-01T00:00:00+00:00", "x")}, "cursor"),
        ]:
            refused = await alice.get(f"/v2/jobs/{job_id}/events", params=params)
            assert refused.status_code == 422, refused.text
            assert refused.json()["field"] == field


# -- results and data, on both object stores -------------------------------------------------

# Names whose key order and folder order differ ("a-z" sorts before "a/b").
_PATHS = [f"{folder}/{n:03d}.bin" for folder in ("a", "a-z", "a/b", "b") for n in range(60)]
_PATHS += ["a.txt", "top.bin"]


async def test_results_are_listed_once_across_pages(api_on_stores: Harness) -> None:
    api = api_on_stores
    alice, _, _ = await _new_user(api, "alice")
    async with alice:
        job_id = (await submit(alice)).json()["id"]
        objects = api.app.state.dlaas.objects
        for path in _PATHS:
            objects.put_bytes(f"jobs/{job_id}/results/{path}", path.encode())
        objects.put_bytes(f"jobs/{job_id}/logs/learner-1.log", b"not a result")
        path = f"/v2/jobs/{job_id}/results"
        for limit in (1, 37, 1000):
            listed, _ = await _every_page(alice, path, "files", limit=limit)
            assert sorted(f["path"] for f in listed) == sorted(_PATHS), limit
            assert len(listed) == len(_PATHS)
        assert {f["size"] for f in listed} == {len(p) for p in _PATHS}
        first = (await alice.get(path)).json()
        assert len(first["files"]) == 100 and first["next"]
        refused = await alice.get(path, params={"cursor": "garbage"})
        assert refused.status_code == 422
        assert refused.json()["field"] == "cursor"


async def test_data_containers_are_listed_once_across_pages(api_on_stores: Harness) -> None:
    api = api_on_stores
    alice, _, alice_id = await _new_user(api, "alice")
    bob, _, _ = await _new_user(api, "bob")
    async with alice, bob:
        objects = api.app.state.dlaas.objects
        for path in _PATHS:
            objects.put_bytes(data_prefix(alice_id, "shards") + path, b"x")
        listed, pages = await _every_page(alice, "/v2/data/shards", "files", limit=50)
        assert sorted(f["path"] for f in listed) == sorted(_PATHS)
        assert len(listed) == len(_PATHS)
        assert pages == -(-len(_PATHS) // 50)
        assert (await bob.get("/v2/data/shards")).json() == {"files": [], "next": None}
        cursor = (await alice.get("/v2/data/shards", params={"limit": 2})).json()["next"]
        bobs = await bob.get("/v2/data/shards", params={"cursor": cursor})
        assert bobs.json()["files"] == []  # a position, not a permission
        for params in ({"limit": 0}, {"limit": 1001}):
            refused = await alice.get("/v2/data/shards", params=params)
            assert refused.status_code == 422
            assert refused.json()["field"] == "limit"
