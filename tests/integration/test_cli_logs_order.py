"""`dlaas logs` of several learners without --follow: their lines in time order, against the
real API served over a socket. Times come from the live stream's batches; the stored log
holds bare lines (the rule is in `api.services.log_join`)."""

from __future__ import annotations

import json

from storage import streams
from storage.job_states import JobState
from tests.integration.api_harness import ADMIN_TOKEN, CliOnApi, submit


def _batch(learner: int, first: int, time: float, *lines: str) -> streams.LogBatch:
    return streams.LogBatch(learner, 0, first, lines, time)


async def _two_learner_job(cli: CliOnApi) -> str:
    """A running two-learner job: each learner's stored log begins with a line the stream no
    longer holds; the stream holds the rest, sent at alternating times, and learner 1's last
    line is not stored yet."""
    answer = await submit(cli.api.admin)
    assert answer.status_code == 201, answer.text
    job_id: str = answer.json()["id"]
    await cli.api.move_job(job_id, JobState.DEPLOYING, JobState.RUNNING)
    state = cli.api.app.state.dlaas
    state.objects.put_bytes(f"jobs/{job_id}/logs/learner-1.log", b"1 old\n1 at 10\n1 at 30\n")
    state.objects.put_bytes(f"jobs/{job_id}/logs/learner-2.log", b"2 old\n2 at 20\n")
    await streams.aappend_logs(
        state.redis,
        job_id,
        [
            _batch(2, 2, 20.0, "2 at 20"),  # the stream's order is not the lines' time order
            _batch(1, 2, 10.0, "1 at 10"),
            _batch(1, 3, 30.0, "1 at 30"),
            _batch(2, 3, 35.0, "2 at 35"),
            _batch(1, 4, 40.0, "1 at 40"),
        ],
    )
    return job_id


async def test_logs_prints_several_learners_lines_in_time_order(cli: CliOnApi) -> None:
    job_id = await _two_learner_job(cli)
    try:
        result = await cli.dlaas(ADMIN_TOKEN, "logs", job_id)
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines() == [
            "[1] 1 old",  # before the stream's window: learner by learner
            "[2] 2 old",
            "[1] 1 at 10",
            "[2] 2 at 20",
            "[1] 1 at 30",
            "[2] 2 at 35",
            "[1] 1 at 40",
        ]

        only = await cli.dlaas(ADMIN_TOKEN, "logs", job_id, "--learner", "2")
        assert only.exit_code == 0, only.output
        assert only.stdout.splitlines() == ["2 old", "2 at 20", "2 at 35"]

        as_json = await cli.dlaas(ADMIN_TOKEN, "--output", "json", "logs", job_id)
        assert as_json.exit_code == 0, as_json.output
        rows = [json.loads(text) for text in as_json.stdout.splitlines()]
        assert [(r["learner"], r["line"], r["time"]) for r in rows] == [
            (1, "1 old", None),
            (2, "2 old", None),
            (1, "1 at 10", 10.0),
            (2, "2 at 20", 20.0),
            (1, "1 at 30", 30.0),
            (2, "2 at 35", 35.0),
            (1, "1 at 40", 40.0),
        ]
        assert {r["event"] for r in rows} == {"line"}

        # Plain HTTP clients get the same order as bare text.
        text = (await cli.api.admin.get(f"/v2/jobs/{job_id}/logs")).text
        assert text.splitlines() == [r["line"] for r in rows]
    finally:
        await cli.api.app.state.dlaas.redis.delete(streams.logs_key(job_id))


async def test_a_log_whose_stream_has_gone_reads_learner_after_learner(cli: CliOnApi) -> None:
    """Long after a job ended no line has a time any more: each learner's lines, in turn."""
    answer = await submit(cli.api.admin)
    job_id: str = answer.json()["id"]
    await cli.api.move_job(job_id, JobState.DEPLOYING, JobState.RUNNING, JobState.COMPLETED)
    objects = cli.api.app.state.dlaas.objects
    objects.put_bytes(f"jobs/{job_id}/logs/learner-1.log", b"a\nb\n")
    objects.put_bytes(f"jobs/{job_id}/logs/learner-2.log", b"c\n")
    result = await cli.dlaas(ADMIN_TOKEN, "logs", job_id)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["[1] a", "[1] b", "[2] c"]
