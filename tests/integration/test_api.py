"""The REST API against a real database (SQLite and PostgreSQL), Redis and object store."""

from __future__ import annotations

import asyncio
import io
import json
import zipfile
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from api.services.log_join import Position, decode_position
from api.services.logs import follow_events
from storage import jobs as repo
from storage import streams
from storage.db import make_engine, make_sessionmaker
from storage.job_states import JobState
from tests.integration.api_harness import (
    MANIFEST,
    MODEL_ZIP,
    Harness,
    make_zip,
    submit,
)


async def _move_job(harness: Harness, job_id: str, *states: JobState) -> None:
    engine = make_engine(harness.settings.database_url)
    try:
        async with make_sessionmaker(engine)() as session:
            for state in states:
                moved = await repo.transition(session, job_id, state, f"test moves to {state}")
                assert moved.changed
            await session.commit()
    finally:
        await engine.dispose()


async def test_submit_returns_201_with_location_and_stores_the_archive(api: Harness) -> None:
    async with await api.new_user("alice") as alice:
        response = await submit(alice)
        assert response.status_code == 201, response.text
        job = response.json()
        assert response.headers["location"] == f"/v2/jobs/{job['id']}"
        assert job["state"] == "QUEUED"
        assert job["learners"] == 2
        assert job["owner"].startswith("alice-")
        stored = api.app.state.dlaas.objects.get_bytes(f"jobs/{job['id']}/model.zip")
        assert stored == MODEL_ZIP
        shown = await alice.get(f"/v2/jobs/{job['id']}")
        assert shown.status_code == 200
        assert shown.json()["id"] == job["id"]
        listed = await alice.get("/v2/jobs")
        assert [j["id"] for j in listed.json()["jobs"]] == [job["id"]]
        events = await alice.get(f"/v2/jobs/{job['id']}/events")
        assert events.json()["events"][0]["kind"] == "submitted"


async def test_another_users_token_sees_nothing(api: Harness) -> None:
    async with await api.new_user("alice") as alice, await api.new_user("bob") as bob:
        job_id = (await submit(alice)).json()["id"]
        assert (await bob.get("/v2/jobs")).json() == {"jobs": [], "next": None}
        for method, path in [
            ("GET", f"/v2/jobs/{job_id}"),
            ("GET", f"/v2/jobs/{job_id}/events"),
            ("GET", f"/v2/jobs/{job_id}/logs"),
            ("GET", f"/v2/jobs/{job_id}/metrics"),
            ("GET", f"/v2/jobs/{job_id}/results"),
            ("POST", f"/v2/jobs/{job_id}/halt"),
            ("POST", f"/v2/jobs/{job_id}/resume"),
            ("DELETE", f"/v2/jobs/{job_id}"),
        ]:
            response = await bob.request(method, path)
            assert response.status_code == 404, (method, path, response.text)
            assert response.json()["error"] == "not_found"
        assert (await alice.get(f"/v2/jobs/{job_id}")).status_code == 200


async def test_an_id_no_job_can_have_is_refused_naming_it(api: Harness) -> None:
    async with await api.new_user("alice") as alice:
        for bad in ["a%00b", "x" * 41, "Training-A"]:
            response = await alice.get(f"/v2/jobs/{bad}/events")
            assert response.status_code == 422, (bad, response.text)
            assert response.json()["field"] == "job_id"


@pytest.mark.parametrize(
    ("headers", "code"),
    [({}, "missing_token"), ({"Authorization": "Bearer nope"}, "bad_token")],
)
async def test_requests_without_a_valid_token_are_401(
    api: Harness, headers: dict[str, str], code: str
) -> None:
    async with api.client(None) as anonymous:
        response = await anonymous.get("/v2/jobs", headers=headers)
    assert response.status_code == 401
    assert response.json()["error"] == code
    assert "DLAAS_TOKEN" in response.json()["detail"]


def _zip_with(name: str, data: bytes = b"x") -> bytes:
    return make_zip({name: data})


def _symlink_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        info = zipfile.ZipInfo("link")
        info.external_attr = (0o120777 << 16) | 0
        archive.writestr(info, "/etc/passwd")
    return buffer.getvalue()


def _bomb_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("zeros.bin", b"\0" * (50 * 1024 * 1024))
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("manifest", "model", "status", "field", "code"),
    [
        (b"name: [unclosed\n  learners: 2", MODEL_ZIP, 422, "manifest", "invalid_manifest"),
        (b"name: x\nframework:\n  name: pytorch\n", MODEL_ZIP, 422, "framework.command", None),
        (b"- just\n- a list\n", MODEL_ZIP, 422, "manifest", None),
        (MANIFEST.replace(b"learners: 2", b"learners: 0"), MODEL_ZIP, 422, "learners", None),
        (MANIFEST.replace(b"1Gb", b"lots"), MODEL_ZIP, 422, "memory", None),
        (
            MANIFEST + b"restart_policy: {scope: pod}\n",
            MODEL_ZIP,
            422,
            "restart_policy.scope",
            "invalid_manifest",
        ),
        (MANIFEST, _zip_with("../../etc/cron.d/evil"), 422, "model", "unsafe_path"),
        (MANIFEST, _zip_with("/etc/passwd"), 422, "model", "unsafe_path"),
        (MANIFEST, _symlink_zip(), 422, "model", "link_in_archive"),
        (MANIFEST, _bomb_zip(), 422, "model", "zip_bomb"),
        (MANIFEST, b"this is not a zip", 422, "model", "invalid_archive"),
        (MANIFEST, make_zip({}), 422, "model", "empty_archive"),
        (
            MANIFEST + b"data_stores:\n  - id: s\n    training_data: {container: ../../etc}\n",
            MODEL_ZIP,
            422,
            "data_stores[0].training_data.container",
            "invalid_manifest",
        ),
        (
            MANIFEST
            + b"data_stores:\n  - id: s\n    training_data: {container: d}\n"
            + b"    training_results: {container: ../../x}\n",
            MODEL_ZIP,
            422,
            "data_stores[0].training_results.container",
            "invalid_manifest",
        ),
    ],
)
async def test_bad_input_is_refused_naming_the_field(
    api: Harness, manifest: bytes, model: bytes, status: int, field: str, code: str | None
) -> None:
    async with await api.new_user("alice") as alice:
        response = await submit(alice, manifest, model)
        assert response.status_code == status, response.text
        body = response.json()
        assert body["field"] == field, body
        assert body["detail"]
        if field == "restart_policy.scope":  # the values it takes, too
            assert "'gang' or 'learner'" in body["detail"], body
        if code:
            assert body["error"] == code, body
        assert (await alice.get("/v2/jobs")).json() == {"jobs": [], "next": None}
    assert not list(api.app.state.dlaas.objects.list("jobs/"))


async def test_a_form_without_the_model_field_is_refused(api: Harness) -> None:
    async with await api.new_user("alice") as alice:
        response = await alice.post(
            "/v2/jobs", files={"manifest": ("manifest.yml", MANIFEST, "application/x-yaml")}
        )
    assert response.status_code == 422
    assert response.json()["field"] == "model"


async def test_a_form_with_a_field_a_submission_does_not_take_is_refused(api: Harness) -> None:
    async with await api.new_user("alice") as alice:
        response = await alice.post(
            "/v2/jobs",
            files={
                "manifest": ("manifest.yml", MANIFEST, "application/x-yaml"),
                "model": ("model.zip", MODEL_ZIP, "application/zip"),
                "modle": ("model.zip", MODEL_ZIP, "application/zip"),
            },
        )
        assert response.status_code == 422
        assert response.json()["field"] == "modle"
        assert (await alice.get("/v2/jobs")).json() == {"jobs": [], "next": None}


async def test_an_oversized_upload_is_413_before_it_is_read(api: Harness) -> None:
    api.app.state.dlaas.archive_limits = type(api.app.state.dlaas.archive_limits)(
        max_bytes=1024,
        max_files=10,
        max_unpacked_bytes=10**6,
        max_compression_ratio=100.0,
    )
    async with await api.new_user("alice") as alice:
        response = await submit(alice, MANIFEST, b"0" * 200_000)
    assert response.status_code == 413
    assert response.json()["field"] == "model"


async def test_logs_follow_streams_sse_and_ends_with_the_final_state(
    api: Harness, redis_url: str
) -> None:
    async with await api.new_user("alice") as alice:
        job_id = (await submit(alice)).json()["id"]
        redis = Redis.from_url(redis_url)
        try:
            await streams.aappend_logs(
                redis, job_id, [_lines(1, 1, "hello from 1"), _lines(2, 1, "hello from 2")]
            )
            await _move_job(api, job_id, JobState.DEPLOYING, JobState.RUNNING, JobState.COMPLETED)
            response = await alice.get(f"/v2/jobs/{job_id}/logs", params={"follow": "true"})
            assert response.headers["content-type"].startswith("text/event-stream")
            events = [block for block in response.text.split("\n\n") if block.strip()]
            data = [json.loads(b.split("data: ", 1)[1]) for b in events]
            assert [d.get("line") for d in data[:2]] == ["hello from 1", "hello from 2"]
            assert events[0].startswith("id: 1:1\n")
            assert events[1].startswith("id: 1:1,2:1\n")
            assert "event: end" in events[-1]
            assert data[-1] == {"state": "COMPLETED"}
            only_two = await alice.get(
                f"/v2/jobs/{job_id}/logs", params={"follow": "true", "learner": 2}
            )
            assert "hello from 1" not in only_two.text
            assert "hello from 2" in only_two.text
            plain = await alice.get(f"/v2/jobs/{job_id}/logs")
            assert plain.text == "hello from 1\nhello from 2\n"
            no_such = await alice.get(f"/v2/jobs/{job_id}/logs", params={"learner": 3})
            assert no_such.status_code == 404
            assert no_such.json()["field"] == "learner"
        finally:
            await redis.delete(streams.logs_key(job_id))
            await redis.aclose()


async def test_logs_of_a_finished_job_fall_back_to_the_stored_log(api: Harness) -> None:
    async with await api.new_user("alice") as alice:
        job_id = (await submit(alice)).json()["id"]
        objects = api.app.state.dlaas.objects
        objects.put_bytes(f"jobs/{job_id}/logs/learner-1.log", b"stored one\nstored two\n")
        await _move_job(api, job_id, JobState.DEPLOYING, JobState.FAILED)
        followed = await alice.get(f"/v2/jobs/{job_id}/logs", params={"follow": "true"})
        assert "stored one" in followed.text
        assert '"state": "FAILED"' in followed.text or '"state":"FAILED"' in followed.text
        plain = await alice.get(f"/v2/jobs/{job_id}/logs")
        assert plain.text == "stored one\nstored two\n"


def _lines(learner: int, first: int, *lines: str, attempt: int = 0) -> streams.LogBatch:
    return streams.LogBatch(learner, attempt, first, lines, 1.0)


def _points(learner: int, first: int, *steps: int) -> streams.MetricBatch:
    points = tuple(streams.metric_line(learner, 3.0, s, {"loss": 1 / s}) for s in steps)
    return streams.MetricBatch(learner, 0, first, points)


async def test_a_running_jobs_log_is_its_stored_part_then_the_live_lines_beyond_it(
    api: Harness, redis_url: str
) -> None:
    """The runner stores the log every 10 s; the stream holds recent numbered batches that
    overlap the stored part, and may have lost older ones."""
    async with await api.new_user("alice") as alice:
        job_id = (await submit(alice)).json()["id"]
        await _move_job(api, job_id, JobState.DEPLOYING, JobState.RUNNING)
        stored = "".join(f"line {n}\n" for n in range(1, 301)).encode()
        api.app.state.dlaas.objects.put_bytes(f"jobs/{job_id}/logs/learner-1.log", stored)
        redis = Redis.from_url(redis_url)
        try:
            live = [_lines(1, n, *(f"line {k}" for k in range(n, n + 100))) for n in (201, 301)]
            # The stream lost lines 401..449 of learner 1; learner 2 has nothing stored yet.
            live.append(_lines(1, 450, "line 450"))
            live.append(_lines(2, 1, "two 1", "two 2"))
            await streams.aappend_logs(redis, job_id, live)
            plain = (await alice.get(f"/v2/jobs/{job_id}/logs")).text.splitlines()
            assert plain[:400] == [f"line {n}" for n in range(1, 401)]
            assert plain[400].startswith("[dlaas] 49 lines are not stored yet")
            assert plain[401:] == ["line 450", "two 1", "two 2"]

            state = api.app.state.dlaas
            followed = follow_events(state, job_id, [1, 2], Position())
            events: list[dict[str, object]] = []
            while len(events) < 404:
                events += await _next_sse(followed)
            assert [e["line"] for e in events[:400]] == [f"line {n}" for n in range(1, 401)]
            assert events[400]["gap"] == 49
            assert events[400]["line"] == (
                "[dlaas] 49 lines skipped in the live view; `dlaas logs` has them"
            )
            assert [e["line"] for e in events[401:]] == ["line 450", "two 1", "two 2"]

            # A follower that reconnects after line 350 of learner 1 gets the rest once.
            again = follow_events(state, job_id, [1, 2], decode_position("1:350"))
            got: list[dict[str, object]] = []
            while len(got) < 54:
                got += await _next_sse(again)
            assert [e["line"] for e in got[:50]] == [f"line {n}" for n in range(351, 401)]
            assert [e.get("gap") for e in got[50:]] == [49, None, None, None]
            bad = await alice.get(
                f"/v2/jobs/{job_id}/logs",
                params={"follow": "true"},
                headers={"Last-Event-ID": "1700000000000-0"},
            )
            assert bad.status_code == 400
            assert bad.json()["field"] == "Last-Event-ID"
        finally:
            await redis.delete(streams.logs_key(job_id))
            await redis.aclose()


async def test_a_follow_gets_the_last_lines_from_the_stored_log_when_the_live_view_missed_them(
    api: Harness, redis_url: str
) -> None:
    """Redis lost the runner's last batches (or the live view skipped them): the follower
    still gets every line before `end`, from the log the runner stored before it exited."""
    state = api.app.state.dlaas
    async with await api.new_user("alice") as alice:
        job_id = (await submit(alice)).json()["id"]
        await _move_job(api, job_id, JobState.DEPLOYING, JobState.RUNNING)
        redis = Redis.from_url(redis_url)
        try:
            await streams.aappend_logs(redis, job_id, [_lines(1, 1, "one", "two")])
            followed = follow_events(state, job_id, [1, 2], Position())
            assert [e["line"] for e in await _next_sse(followed)] == ["one", "two"]
            key = f"jobs/{job_id}/logs/learner-1.log"
            state.objects.put_bytes(key, b"one\ntwo\nthree\nlast words\n")
            await _move_job(api, job_id, JobState.COMPLETED)
            rest: list[dict[str, object]] = []
            while not rest or "state" not in rest[-1]:
                rest += await _next_sse(followed)
            assert [e.get("line") for e in rest[:-1]] == ["three", "last words"]
            assert rest[-1] == {"state": "COMPLETED"}
        finally:
            await redis.delete(streams.logs_key(job_id))
            await redis.aclose()


async def test_metrics_are_the_stored_points_then_the_live_ones_beyond_them(
    api: Harness, redis_url: str
) -> None:
    async with await api.new_user("alice") as alice:
        job_id = (await submit(alice)).json()["id"]
        objects = api.app.state.dlaas.objects
        stored = (
            "".join(streams.metric_line(1, 4.0, s, {"loss": 1 / s}) + "\n" for s in (1, 2))
            + '{"learner": 9, "time": "forged", "step": 3, "values": {"loss": "x", "acc": 1}}\n'
        )
        objects.put_bytes(f"jobs/{job_id}/metrics/learner-1.jsonl", stored.encode())
        redis = Redis.from_url(redis_url)
        try:
            await streams.aappend_metrics(
                redis, job_id, [_points(1, 2, 2, 3, 4), _points(2, 1, 10)]
            )
            got = (await alice.get(f"/v2/jobs/{job_id}/metrics")).json()["metrics"]
            assert [(p["learner"], p["step"]) for p in got] == [
                (1, 1),
                (1, 2),
                (1, 3),
                (1, 4),
                (2, 10),
            ]
            assert got[2] == {"learner": 1, "time": 0.0, "step": 3, "values": {"acc": 1.0}}
            assert got[3]["values"] == {"loss": 0.25}
            two = (await alice.get(f"/v2/jobs/{job_id}/metrics", params={"learner": 2})).json()
            assert [p["step"] for p in two["metrics"]] == [10]
            last = await alice.get(f"/v2/jobs/{job_id}/metrics", params={"last": 2})
            assert [(p["learner"], p["step"]) for p in last.json()["metrics"]] == [
                (1, 3),
                (1, 4),
                (2, 10),
            ]
        finally:
            await redis.delete(streams.metrics_key(job_id))
            await redis.aclose()
        # Once the stream is gone, the last points come from the end of the stored ones.
        last = await alice.get(f"/v2/jobs/{job_id}/metrics", params={"last": 1})
        assert [(p["learner"], p["step"]) for p in last.json()["metrics"]] == [(1, 3)]
        too_many = await alice.get(f"/v2/jobs/{job_id}/metrics", params={"last": 5000})
        assert too_many.status_code == 422
        # the schema says digits: the number parser would read these too
        for name, value in (("last", "+1"), ("learner", " 1"), ("limit", "1_0")):
            odd = await alice.get(f"/v2/jobs/{job_id}/metrics", params={name: value})
            assert odd.status_code == 422, (name, value)
            assert odd.json()["field"] == name
        odd_log = await alice.get(f"/v2/jobs/{job_id}/logs", params={"learner": "+2"})
        assert odd_log.status_code == 422
        assert odd_log.json()["field"] == "learner"


async def test_results_are_listed_and_downloaded(api: Harness) -> None:
    async with await api.new_user("alice") as alice:
        job_id = (await submit(alice)).json()["id"]
        objects = api.app.state.dlaas.objects
        objects.put_bytes(f"jobs/{job_id}/results/model.pt", b"weights")
        objects.put_bytes(f"jobs/{job_id}/results/sub/metrics.json", b"{}")
        listed = (await alice.get(f"/v2/jobs/{job_id}/results")).json()["files"]
        assert listed == [{"path": "model.pt", "size": 7}, {"path": "sub/metrics.json", "size": 2}]
        got = await alice.get(f"/v2/jobs/{job_id}/results/model.pt")
        assert got.content == b"weights"
        missing = await alice.get(f"/v2/jobs/{job_id}/results/nope.pt")
        assert missing.status_code == 404
        assert missing.json()["field"] == "path"


async def test_data_upload_is_per_user_and_checks_names(api: Harness) -> None:
    async with await api.new_user("alice") as alice, await api.new_user("bob") as bob:
        put = await alice.put("/v2/data/digits-data/digits.npz", content=b"12345")
        assert put.status_code == 201, put.text
        assert put.json() == {"path": "digits.npz", "size": 5}
        listed = (await alice.get("/v2/data/digits-data")).json()["files"]
        assert listed == [{"path": "digits.npz", "size": 5}]
        assert (await bob.get("/v2/data/digits-data")).json()["files"] == []
        bad = await alice.put("/v2/data/digits-data/a/%2E%2E/b", content=b"x")
        assert bad.status_code in (404, 422)
        bad_name = await alice.put("/v2/data/-bad/x", content=b"x")
        assert bad_name.status_code == 422
        assert bad_name.json()["field"] == "container"


async def test_halt_resume_delete_record_intent(api: Harness) -> None:
    async with await api.new_user("alice") as alice:
        job_id = (await submit(alice)).json()["id"]
        resume_early = await alice.post(f"/v2/jobs/{job_id}/resume")
        assert resume_early.status_code == 409
        assert "dlaas halt" in resume_early.json()["detail"]
        assert (await alice.post(f"/v2/jobs/{job_id}/halt")).status_code == 202
        assert (await alice.delete(f"/v2/jobs/{job_id}")).status_code == 202
        assert (await alice.get(f"/v2/jobs/{job_id}")).status_code == 404
        engine = make_engine(api.settings.database_url)
        async with make_sessionmaker(engine)() as session:
            events = [(e.kind, e.to_state) for e in await repo.list_events(session, job_id)]
            job = await repo.get_job_any(session, job_id)
        await engine.dispose()
        assert events == [("submitted", "QUEUED"), ("halt_requested", None), ("state", "DELETED")]
        assert job is not None
        assert (job.state, job.desired) == ("DELETED", "delete")
        assert job.deleted_at is not None


async def test_a_resumed_halted_job_is_queued_at_once(api: Harness) -> None:
    """No worker runs here: the API itself queues the job, so `dlaas wait` right after a
    resume waits for the new run instead of returning on HALTED, and the scheduler takes the
    job even if the nudge to the workers is lost."""
    async with await api.new_user("alice") as alice:
        job_id = (await submit(alice)).json()["id"]
        assert (await alice.post(f"/v2/jobs/{job_id}/halt")).status_code == 202
        engine = make_engine(api.settings.database_url)
        sessions = make_sessionmaker(engine)
        async with sessions() as session:  # as the lifecycle manager's halt leaves it
            await repo.transition(session, job_id, JobState.HALTED, "halted by user")
            await session.commit()
        resumed = await alice.post(f"/v2/jobs/{job_id}/resume")
        assert resumed.status_code == 202
        assert resumed.json()["state"] == "QUEUED"
        assert (await alice.get(f"/v2/jobs/{job_id}")).json()["state"] == "QUEUED"
        async with sessions() as session:
            events = [(e.kind, e.to_state) for e in await repo.list_events(session, job_id)]
            job = await repo.get_job_any(session, job_id)
        await engine.dispose()
        assert events[-2:] == [("resume_requested", None), ("state", "QUEUED")]
        assert job is not None and job.desired == "run"


async def test_health_prometheus_and_openapi(api: Harness) -> None:
    async with api.client(None) as anonymous:
        assert (await anonymous.get("/healthz")).json() == {"status": "ok"}
        metrics = await anonymous.get("/metrics")
        assert "dlaas_jobs" in metrics.text
        spec = (await anonymous.get("/openapi.json")).json()
        assert "/v2/jobs" in spec["paths"]
        assert (await anonymous.get("/docs")).status_code == 200
        unknown = await anonymous.get("/v2/nothing-here")
        assert unknown.status_code == 404
        assert unknown.json()["error"] == "not_found"


async def test_a_method_a_path_lacks_is_405_allowing_every_method_it_has(api: Harness) -> None:
    async with api.client(None) as anonymous:
        for path, allowed in [("/v2/jobs", "GET, POST"), ("/v2/jobs/x", "DELETE, GET")]:
            refused = await anonymous.request("PATCH", path)
            assert refused.status_code == 405
            assert refused.headers["allow"] == allowed
            assert refused.json() == {
                "error": "method_not_allowed",
                "detail": "Method Not Allowed",
                "field": "method",
            }


async def test_a_job_whose_training_data_is_missing_or_empty_is_refused_naming_the_upload(
    api: Harness,
) -> None:
    manifest = MANIFEST + (
        b"data_stores:\n"
        b"  - id: store\n"
        b"    training_data: {container: digits-data}\n"
        b"    training_results: {container: out}\n"
    )
    async with await api.new_user("alice") as alice:
        refused = await submit(alice, manifest)
        assert refused.status_code == 422, refused.text
        body = refused.json()
        assert body["field"] == "data_stores[0].training_data.container"
        assert "`dlaas data upload digits-data PATH`" in body["detail"]
        assert (await alice.get("/v2/jobs")).json() == {"jobs": [], "next": None}
        assert list(api.app.state.dlaas.objects.list("jobs/")) == []

        uploaded = await alice.put("/v2/data/digits-data/digits.npz", content=b"\x93NUMPY")
        assert uploaded.status_code == 201, uploaded.text
        accepted = await submit(alice, manifest)
        assert accepted.status_code == 201, accepted.text


async def test_training_data_is_looked_up_among_the_submitters_own_containers(
    api: Harness,
) -> None:
    manifest = MANIFEST + b"data_stores:\n  - id: s\n    training_data: {container: shared}\n"
    async with await api.new_user("alice") as alice, await api.new_user("bob") as bob:
        assert (await alice.put("/v2/data/shared/x.bin", content=b"x")).status_code == 201
        assert (await submit(alice, manifest)).status_code == 201
        refused = await submit(bob, manifest)
        assert refused.status_code == 422
        assert refused.json()["field"] == "data_stores[0].training_data.container"


async def _next_sse(events: AsyncIterator[bytes]) -> list[dict[str, object]]:
    chunk = await asyncio.wait_for(anext(events), timeout=30)
    blocks = [block for block in chunk.decode().split("\n\n") if block.strip()]
    return [json.loads(block.split("data: ", 1)[1]) for block in blocks]


async def test_a_follow_ends_when_its_job_is_halted_or_deleted_from_elsewhere(
    api: Harness, redis_url: str
) -> None:
    """`dlaas logs --follow` in one shell, `dlaas halt` or `dlaas delete` in another."""
    state = api.app.state.dlaas
    redis = Redis.from_url(redis_url)
    async with await api.new_user("alice") as alice:
        halted, deleted = [(await submit(alice)).json()["id"] for _ in range(2)]
        try:
            for job_id in (halted, deleted):
                await _move_job(api, job_id, JobState.DEPLOYING, JobState.RUNNING)
                await streams.aappend_logs(redis, job_id, [_lines(1, 1, f"training {job_id}")])
            following = {
                job_id: follow_events(state, job_id, [1, 2], Position())
                for job_id in (halted, deleted)
            }
            for job_id, events in following.items():
                assert (await _next_sse(events))[0]["line"] == f"training {job_id}"

            await _move_job(api, halted, JobState.HALTED)
            assert (await alice.delete(f"/v2/jobs/{deleted}")).status_code == 202

            assert await _next_sse(following[halted]) == [{"state": "HALTED"}]
            assert await _next_sse(following[deleted]) == [{"state": "DELETED"}]
            again = await alice.get(f"/v2/jobs/{deleted}/logs", params={"follow": "true"})
            assert again.status_code == 404
            assert again.json()["error"] == "deleted"
            assert "was deleted" in again.json()["detail"]
        finally:
            await redis.delete(streams.logs_key(halted), streams.logs_key(deleted))
            await redis.aclose()


async def test_a_new_user_is_refused_unless_admin_is_a_boolean(api: Harness) -> None:
    response = await api.admin.post("/v2/users", json={"name": "carol", "admin": 0})
    assert response.status_code == 422
    assert response.json()["field"] == "admin"
