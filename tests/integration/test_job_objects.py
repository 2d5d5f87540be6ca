"""The object gateway a job's learners use (/v2/job-objects), on a real API with PostgreSQL,
Redis and a local store, then S3 (SeaweedFS): a job's token reads and writes its own
`jobs/{id}/`, reads the data containers its manifest names, and is refused everything
else, and everything after its job ends; user tokens and job tokens stay on their sides."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from sqlalchemy import select

from api.state import ApiState
from storage import job_credentials
from storage import jobs as repo
from storage.job_states import JobState
from storage.models import JobCredential
from tests.integration.api_harness import Harness, submit

MANIFEST = b"""
name: gated
learners: 1
framework:
  name: pytorch
  command: python train.py
data_stores:
  - id: store
    training_data: {container: digits}
"""


@dataclass
class Job:
    id: str
    owner: int
    token: str
    client: httpx.AsyncClient  # with the job's token


@dataclass
class World:
    api: Harness
    alice: httpx.AsyncClient
    bob: httpx.AsyncClient
    mine: Job  # alice's job, naming her container "digits"
    sibling: Job  # another job of alice's
    strangers: Job  # bob's job, naming his own "digits"


async def mint(api: Harness, job_id: str) -> str:
    state: ApiState = api.app.state.dlaas
    async with state.sessions() as session, session.begin():
        return await job_credentials.mint(session, job_id)


async def owner_of(api: Harness, job_id: str) -> int:
    state: ApiState = api.app.state.dlaas
    async with state.sessions() as session:
        job = await repo.get_job_any(session, job_id)
        assert job is not None
        return job.owner_id


async def new_job(api: Harness, user: httpx.AsyncClient) -> Job:
    answer = await submit(user, MANIFEST)
    assert answer.status_code == 201, answer.text
    job_id = answer.json()["id"]
    token = await mint(api, job_id)
    return Job(job_id, await owner_of(api, job_id), token, api.client(token))


@pytest.fixture
async def world(api_on_stores: Harness) -> AsyncIterator[World]:
    api = api_on_stores
    async with await api.new_user("alice") as alice, await api.new_user("bob") as bob:
        for user, who in ((alice, b"alice"), (bob, b"bob")):
            for container in ("digits", "private"):
                answer = await user.put(f"/v2/data/{container}/train.csv", content=who)
                assert answer.status_code == 201, answer.text
        mine = await new_job(api, alice)
        sibling = await new_job(api, alice)
        strangers = await new_job(api, bob)
        objects = api.app.state.dlaas.objects
        objects.put_bytes(f"jobs/{sibling.id}/checkpoints/ckpt-1/w", b"theirs")
        try:
            yield World(api, alice, bob, mine, sibling, strangers)
        finally:
            for job in (mine, sibling, strangers):
                await job.client.aclose()


def _refused(answer: httpx.Response, status: int, field: str) -> None:
    assert answer.status_code == status, answer.text
    assert answer.json()["field"] == field, answer.text


async def test_a_job_reads_and_writes_its_own_objects_streamed(world: World) -> None:
    job = world.mine.client
    own = f"jobs/{world.mine.id}"
    big = bytes(range(256)) * (12 * 4096)  # 12 MiB: several parts on S3

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(big), 1 << 20):
            yield big[start : start + (1 << 20)]

    stored = await job.put(f"/v2/job-objects/{own}/checkpoints/ckpt-9/w.bin", content=chunks())
    assert stored.status_code == 201, stored.text
    assert stored.json() == {"key": f"{own}/checkpoints/ckpt-9/w.bin", "size": len(big)}
    small = await job.put(f"/v2/job-objects/{own}/logs/learner 1+x.log", content=b"line\n")
    assert small.status_code == 201, small.text

    got = await job.get(f"/v2/job-objects/{own}/checkpoints/ckpt-9/w.bin")
    assert got.status_code == 200 and got.content == big
    ranged = await job.get(
        f"/v2/job-objects/{own}/checkpoints/ckpt-9/w.bin", headers={"Range": "bytes=100-"}
    )
    assert ranged.status_code == 206 and ranged.content == big[100:]
    past = await job.get(
        f"/v2/job-objects/{own}/logs/learner 1+x.log", headers={"Range": "bytes=5-"}
    )
    assert past.status_code == 416
    assert (await job.get(f"/v2/job-objects/{own}/logs/learner 1+x.log")).content == b"line\n"

    listed = await job.get("/v2/job-objects", params={"prefix": f"{own}/", "limit": 1})
    assert listed.status_code == 200, listed.text
    first = listed.json()
    assert first["objects"] == [{"key": f"{own}/checkpoints/ckpt-9/w.bin", "size": len(big)}]
    rest = await job.get(
        "/v2/job-objects", params={"prefix": f"{own}/", "limit": 10, "cursor": first["next"]}
    )
    assert [o["key"] for o in rest.json()["objects"]] == [
        f"{own}/logs/learner 1+x.log",
        f"{own}/model.zip",  # the archive the API stored at submission
    ]
    assert rest.json()["next"] is None

    deleted = await job.delete("/v2/job-objects", params={"prefix": f"{own}/checkpoints/"})
    assert deleted.json() == {"deleted": 1}
    missing = await job.get(f"/v2/job-objects/{own}/checkpoints/ckpt-9/w.bin")
    _refused(missing, 404, "key")


async def test_a_job_reads_the_data_container_its_manifest_names(world: World) -> None:
    data = f"data/{world.mine.owner}/digits/"
    job = world.mine.client
    assert (await job.get(f"/v2/job-objects/{data}train.csv")).content == b"alice"
    listed = await job.get("/v2/job-objects", params={"prefix": data})
    assert listed.json()["objects"] == [{"key": f"{data}train.csv", "size": 5}]


@pytest.mark.parametrize(
    "attempt",
    [
        "read another job's object",
        "list another job's objects",
        "overwrite another job's object",
        "delete another job's objects",
        "read the owner's other container",
        "list the owner's other container",
        "read another user's container of the same name",
        "list every user's data",
        "write into its own data container",
        "delete its own data container",
        "read with '..' out of its prefix",
        "write with '..' out of its prefix",
        "list with '..' out of its prefix",
        "delete with '..' out of its prefix",
        "an absolute key",
        "list everything",
        "a prefix sharing its id's start",
    ],
)
async def test_a_job_is_refused_everything_else(world: World, attempt: str) -> None:
    job = world.mine.client
    own, sibling = f"jobs/{world.mine.id}", f"jobs/{world.sibling.id}"
    alice, bob = world.mine.owner, world.strangers.owner
    dots = f"jobs/{world.mine.id}/%2E%2E/{world.sibling.id}/checkpoints/ckpt-1/w"
    requests = {
        "read another job's object": ("GET", f"{sibling}/checkpoints/ckpt-1/w", None, "key"),
        "list another job's objects": ("GET", "", {"prefix": f"{sibling}/"}, "prefix"),
        "overwrite another job's object": ("PUT", f"{sibling}/checkpoints/ckpt-1/w", None, "key"),
        "delete another job's objects": ("DELETE", "", {"prefix": f"{sibling}/"}, "prefix"),
        "read the owner's other container": ("GET", f"data/{alice}/private/train.csv", None, "key"),
        "list the owner's other container": ("GET", "", {"prefix": f"data/{alice}/"}, "prefix"),
        "read another user's container of the same name": (
            "GET", f"data/{bob}/digits/train.csv", None, "key",
        ),
        "list every user's data": ("GET", "", {"prefix": "data/"}, "prefix"),
        "write into its own data container": ("PUT", f"data/{alice}/digits/x.csv", None, "key"),
        "delete its own data container": (
            "DELETE", "", {"prefix": f"data/{alice}/digits/"}, "prefix",
        ),
        "read with '..' out of its prefix": ("GET", dots, None, "key"),
        "write with '..' out of its prefix": ("PUT", dots, None, "key"),
        "list with '..' out of its prefix": (
            "GET", "", {"prefix": f"{own}/../{world.sibling.id}/"}, "prefix",
        ),
        "delete with '..' out of its prefix": ("DELETE", "", {"prefix": f"{own}/../"}, "prefix"),
        "an absolute key": ("GET", f"%2F{own}/x", None, "key"),
        "list everything": ("GET", "", {"prefix": "jobs/"}, "prefix"),
        "a prefix sharing its id's start": ("GET", "", {"prefix": own}, "prefix"),
    }  # fmt: skip
    method, key, params, field = requests[attempt]
    url = f"/v2/job-objects/{key}" if key else "/v2/job-objects"
    content = b"forged" if method == "PUT" else None
    answer = await job.request(method, url, params=params, content=content)
    _refused(answer, 403, field)
    assert answer.json()["error"] == "out_of_scope"
    # Nothing was changed or let out.
    objects = world.api.app.state.dlaas.objects
    assert objects.get_bytes(f"{sibling}/checkpoints/ckpt-1/w") == b"theirs"
    assert objects.get_bytes(f"data/{alice}/digits/train.csv") == b"alice"
    assert not objects.exists(f"data/{alice}/digits/x.csv")


async def test_user_tokens_and_job_tokens_stay_on_their_sides(world: World) -> None:
    own = f"jobs/{world.mine.id}/"
    for user in (world.alice, world.api.admin):
        refused = await user.get("/v2/job-objects", params={"prefix": own})
        _refused(refused, 401, "Authorization")
        _refused(await user.put(f"/v2/job-objects/{own}x", content=b"x"), 401, "Authorization")
    job = world.mine.client
    for path in ("/v2/jobs", f"/v2/jobs/{world.mine.id}", "/v2/data/digits", "/v2/users/me"):
        _refused(await job.get(path), 401, "Authorization")
    unknown = world.api.client("dlaasjob_" + "x" * 43)
    async with unknown:
        _refused(await unknown.get("/v2/job-objects", params={"prefix": own}), 401, "Authorization")


async def _refused_within(job: Job, seconds: float) -> float:
    """How long until the job's token is refused (it must be, within `seconds`)."""
    start = time.monotonic()
    own = f"jobs/{job.id}/"
    while time.monotonic() - start < seconds:
        answer = await job.client.get("/v2/job-objects", params={"prefix": own})
        if answer.status_code == 401:
            return time.monotonic() - start
        assert answer.status_code == 200, answer.text
        await asyncio.sleep(0.05)
    raise AssertionError(f"the job's token still works {seconds} s after the job ended")


@pytest.mark.parametrize("end", [JobState.FAILED, JobState.COMPLETED, JobState.HALTED, "deleted"])
async def test_a_token_dies_with_its_job(world: World, end: JobState | str) -> None:
    job = world.mine
    own = f"jobs/{job.id}/"
    assert (await job.client.get("/v2/job-objects", params={"prefix": own})).status_code == 200
    if end == "deleted":
        assert (await world.alice.delete(f"/v2/jobs/{job.id}")).status_code in (200, 202, 204)
    else:
        state: ApiState = world.api.app.state.dlaas
        async with state.sessions() as session, session.begin():
            path = {
                JobState.FAILED: [JobState.FAILED],
                JobState.COMPLETED: [JobState.DEPLOYING, JobState.RUNNING, JobState.COMPLETED],
                JobState.HALTED: [JobState.HALTED],
            }[JobState(end)]
            for target in path:
                assert (await repo.transition(session, job.id, target, "test")).changed
    assert await _refused_within(job, 5.0) <= 5.0
    # Revoked in the database too, not only refused for the job's state.
    state = world.api.app.state.dlaas
    async with state.sessions() as session:
        assert await job_credentials.lookup(session, job.token) is None
        rows = (
            await session.execute(select(JobCredential).where(JobCredential.job_id == job.id))
        ).scalars()
        assert all(row.revoked_at is not None for row in rows)
    # The other jobs' tokens still work.
    sibling = await world.sibling.client.get(
        "/v2/job-objects", params={"prefix": f"jobs/{world.sibling.id}/"}
    )
    assert sibling.status_code == 200
