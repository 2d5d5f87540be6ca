"""`Idempotency-Key`: a retried POST gets the first answer and never a second effect."""

from __future__ import annotations

import asyncio
import hashlib
from datetime import timedelta

import httpx
import pytest
from sqlalchemy import func, select

from storage import idempotency
from storage.db import make_engine, make_sessionmaker
from storage.models import IdempotentRequest, utcnow
from tests.integration.api_harness import MANIFEST, Harness, submit


async def _count_jobs(client: httpx.AsyncClient) -> int:
    listed = await client.get("/v2/jobs")
    assert listed.status_code == 200
    return len(listed.json()["jobs"])


async def test_a_retried_submission_gets_the_first_job_back(api: Harness) -> None:
    async with await api.new_user("retrier") as alice:
        alice.headers["Idempotency-Key"] = "submit-0001"
        first = await submit(alice)
        assert first.status_code == 201, first.text
        retry = await submit(alice)  # a new multipart boundary, the same request
        assert retry.status_code == 201, retry.text
        assert retry.json()["id"] == first.json()["id"]
        assert retry.headers["location"] == first.headers["location"]
        assert retry.headers["idempotent-replayed"] == "true"
        assert "idempotent-replayed" not in first.headers
        alice.headers["Idempotency-Key"] = "submit-0002"
        second = await submit(alice)
        assert second.status_code == 201
        assert second.json()["id"] != first.json()["id"]
        assert await _count_jobs(alice) == 2


async def test_concurrent_retries_make_one_job(api: Harness) -> None:
    async with await api.new_user("racer") as alice:
        alice.headers["Idempotency-Key"] = "race-key"
        answers = await asyncio.gather(*(submit(alice) for _ in range(6)))
        created = [a for a in answers if a.status_code == 201]
        busy = [a for a in answers if a.status_code == 409]
        assert len(created) + len(busy) == 6, [a.text for a in answers]
        assert len(created) >= 1
        assert len({a.json()["id"] for a in created}) == 1
        for answer in busy:
            assert answer.headers["retry-after"] == "1"
            assert answer.json()["field"] == "Idempotency-Key"
        assert await _count_jobs(alice) == 1


async def test_a_key_used_for_another_request_is_refused_naming_the_header(api: Harness) -> None:
    async with await api.new_user("reuser") as alice:
        alice.headers["Idempotency-Key"] = "reused"
        assert (await submit(alice)).status_code == 201
        other = await submit(alice, manifest=MANIFEST.replace(b"tiny", b"other"))
        assert other.status_code == 422
        assert other.json()["error"] == "idempotency_key_reused"
        assert other.json()["field"] == "Idempotency-Key"
        assert await _count_jobs(alice) == 1


async def test_keys_belong_to_whoever_sent_them(api: Harness) -> None:
    async with await api.new_user("one") as one, await api.new_user("two") as two:
        one.headers["Idempotency-Key"] = two.headers["Idempotency-Key"] = "shared-key"
        first, second = await submit(one), await submit(two)
        assert first.status_code == second.status_code == 201
        assert first.json()["id"] != second.json()["id"]


@pytest.mark.parametrize("key", ["", "x" * 256, "tab\there"])
async def test_a_malformed_key_is_refused(api: Harness, key: str) -> None:
    async with await api.new_user("badkey") as alice:
        answer = await alice.post("/v2/jobs/none/halt", headers={"Idempotency-Key": key})
        assert answer.status_code == 422
        assert answer.json()["field"] == "Idempotency-Key"


async def test_other_posts_replay_their_answer(api: Harness) -> None:
    async with await api.new_user("halter") as alice:
        job_id = (await submit(alice)).json()["id"]
        halt = await alice.post(f"/v2/jobs/{job_id}/halt", headers={"Idempotency-Key": "h1"})
        assert halt.status_code == 202
        again = await alice.post(f"/v2/jobs/{job_id}/halt", headers={"Idempotency-Key": "h1"})
        assert again.status_code == 202
        assert again.json() == halt.json()
        assert again.headers["idempotent-replayed"] == "true"
        # An answer that says to try later is not kept: the retry runs for real.
        missing = await alice.post("/v2/jobs/nope/halt", headers={"Idempotency-Key": "h2"})
        assert missing.status_code == 404
        replayed = await alice.post("/v2/jobs/nope/halt", headers={"Idempotency-Key": "h2"})
        assert replayed.status_code == 404


async def test_a_refused_token_keeps_no_answer(api: Harness) -> None:
    stranger = api.client("not-a-token")
    async with stranger:
        stranger.headers["Idempotency-Key"] = "unauthorized"
        answer = await submit(stranger)
        assert answer.status_code == 401
    engine = make_engine(api.settings.database_url)
    try:
        async with make_sessionmaker(engine)() as session:
            scope = hashlib.sha256(b"Bearer not-a-token").hexdigest()
            rows = await session.scalar(
                select(func.count()).where(IdempotentRequest.scope == scope)
            )
        assert rows == 0
    finally:
        await engine.dispose()


async def test_a_claim_whose_request_died_is_taken_over_once_stale(api: Harness) -> None:
    engine = make_engine(api.settings.database_url)
    sessions = make_sessionmaker(engine)
    try:
        start = utcnow()
        first = await idempotency.claim(sessions, "s" * 64, "k", "POST", "/v2/x", start)
        assert isinstance(first, idempotency.Claimed)
        soon = start + timedelta(seconds=idempotency.PENDING_STALE_S / 2)
        busy = await idempotency.claim(sessions, "s" * 64, "k", "POST", "/v2/x", soon)
        assert isinstance(busy, idempotency.InProgress)
        late = start + timedelta(seconds=idempotency.PENDING_STALE_S + 1)
        taken = await idempotency.claim(sessions, "s" * 64, "k", "POST", "/v2/x", late)
        assert isinstance(taken, idempotency.Claimed)
        async with sessions() as session, session.begin():
            await idempotency.complete(
                session, "s" * 64, "k", fingerprint="f", status=200, headers={}, body=b"{}"
            )
        done = await idempotency.claim(sessions, "s" * 64, "k", "POST", "/v2/x", late)
        assert isinstance(done, idempotency.Answered)
        assert done.same_request("POST", "/v2/x", "f")
        async with sessions() as session, session.begin():
            await idempotency.purge(session, timedelta(days=1), late)
            assert await session.get(IdempotentRequest, ("s" * 64, "k")) is not None
            gone = await idempotency.purge(session, timedelta(days=1), late + timedelta(days=2))
        assert gone >= 1
    finally:
        await engine.dispose()
