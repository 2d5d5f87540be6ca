"""What the `dlaas` command says about a job in each state, against the real API served over
a socket: the message a new user reads and the exit code a script sees."""

from __future__ import annotations

import json
from pathlib import Path

from storage import jobs
from storage.job_states import JobState
from tests.integration.api_harness import ADMIN_TOKEN, CliOnApi, submit

S = JobState


async def _job(cli: CliOnApi, *states: JobState) -> str:
    """A new job of the admin's, moved through `states` as the lifecycle manager would."""
    answer = await submit(cli.api.admin)
    assert answer.status_code == 201, answer.text
    job_id: str = answer.json()["id"]
    await cli.api.move_job(job_id, *states)
    return job_id


# -- halt and resume ---------------------------------------------------------------------


async def test_halt_of_a_running_job_says_it_is_stopping_not_that_it_runs(
    cli: CliOnApi,
) -> None:
    job_id = await _job(cli, S.DEPLOYING, S.RUNNING)
    result = await cli.dlaas(ADMIN_TOKEN, "halt", job_id)
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        f"halt requested: {job_id} is stopping (was RUNNING); "
        f"`dlaas wait {job_id}` returns once it is HALTED\n"
    )


async def test_halt_of_a_halted_job_says_so_and_how_to_continue(cli: CliOnApi) -> None:
    job_id = await _job(cli, S.DEPLOYING, S.RUNNING)
    assert (await cli.api.admin.post(f"/v2/jobs/{job_id}/halt")).status_code == 202
    await cli.api.move_job(job_id, S.HALTED)
    result = await cli.dlaas(ADMIN_TOKEN, "halt", job_id)
    assert result.exit_code == 0, result.output
    assert (
        result.stdout == f"{job_id} is already HALTED: continue it with `dlaas resume {job_id}`\n"
    )


async def test_resume_of_a_halted_job_says_it_is_queued_again(cli: CliOnApi) -> None:
    job_id = await _job(cli, S.DEPLOYING, S.RUNNING)
    assert (await cli.api.admin.post(f"/v2/jobs/{job_id}/halt")).status_code == 202
    await cli.api.move_job(job_id, S.HALTED)
    result = await cli.dlaas(ADMIN_TOKEN, "resume", job_id)
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        f"resume requested: {job_id} is QUEUED again and restarts from its last "
        "committed checkpoint\n"
    )


async def test_resume_while_the_halt_is_under_way_says_the_halt_is_called_off(
    cli: CliOnApi,
) -> None:
    job_id = await _job(cli, S.DEPLOYING, S.RUNNING)
    assert (await cli.api.admin.post(f"/v2/jobs/{job_id}/halt")).status_code == 202
    result = await cli.dlaas(ADMIN_TOKEN, "resume", job_id)
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        f"resume requested: {job_id} was still stopping; its halt is called off (RUNNING)\n"
    )


async def test_resume_of_a_completed_job_points_at_its_results_not_at_halt(
    cli: CliOnApi,
) -> None:
    job_id = await _job(cli, S.DEPLOYING, S.RUNNING, S.COMPLETED)
    result = await cli.dlaas(ADMIN_TOKEN, "resume", job_id)
    assert result.exit_code == 1
    assert "dlaas halt" not in result.stderr
    assert (
        f"job {job_id} is COMPLETED: it has ended, there is nothing to resume; "
        f"`dlaas download {job_id}` fetches its results" in result.stderr
    )


async def test_resume_of_a_failed_job_points_at_its_logs_and_a_new_run(cli: CliOnApi) -> None:
    job_id = await _job(cli, S.FAILED)
    result = await cli.dlaas(ADMIN_TOKEN, "resume", job_id)
    assert result.exit_code == 1
    assert "dlaas halt" not in result.stderr
    assert f"there is nothing to resume; `dlaas logs {job_id}` shows why" in result.stderr
    assert "`dlaas train`" in result.stderr


async def test_resume_of_a_running_job_still_asks_for_a_halt_first(cli: CliOnApi) -> None:
    job_id = await _job(cli, S.DEPLOYING, S.RUNNING)
    result = await cli.dlaas(ADMIN_TOKEN, "resume", job_id)
    assert result.exit_code == 1
    assert f"`dlaas halt {job_id}` first" in result.stderr


async def test_halt_of_a_completed_job_says_it_has_ended(cli: CliOnApi) -> None:
    job_id = await _job(cli, S.DEPLOYING, S.RUNNING, S.COMPLETED)
    result = await cli.dlaas(ADMIN_TOKEN, "halt", job_id)
    assert result.exit_code == 1
    assert f"job {job_id} is COMPLETED: it has ended, there is nothing to halt" in result.stderr


# -- unknown ids -------------------------------------------------------------------------


async def test_an_unknown_job_id_is_echoed_as_typed(cli: CliOnApi) -> None:
    typed = "training-nö such/job?"
    for command in ("show", "halt", "resume", "logs", "download"):
        result = await cli.dlaas(ADMIN_TOKEN, command, typed)
        assert result.exit_code == 1, (command, result.output)
        assert f"no job {typed}: see your jobs with `dlaas list`" in result.stderr, command
        assert "%" not in result.stderr, command


# -- download ----------------------------------------------------------------------------


def _store_result(cli: CliOnApi, job_id: str, path: str, data: bytes) -> None:
    cli.api.app.state.dlaas.objects.put_bytes(f"jobs/{job_id}/results/{path}", data)


async def _failed_job(cli: CliOnApi, reason: str) -> str:
    job_id = await _job(cli, S.DEPLOYING, S.RUNNING)
    async with cli.api.app.state.dlaas.sessions() as session:
        moved = await jobs.transition(session, job_id, S.FAILED, reason)
        assert moved.changed
        await session.commit()
    return job_id


async def test_download_of_a_failed_job_without_results_says_it_failed_and_why(
    cli: CliOnApi, tmp_path: Path
) -> None:
    job_id = await _failed_job(cli, "learner 1 exited with code 2")
    result = await cli.dlaas(ADMIN_TOKEN, "download", job_id, "--dest", str(tmp_path / "out"))
    assert result.exit_code == 1, result.output
    assert "no results yet" not in result.stderr
    assert (
        f"job {job_id} FAILED (learner 1 exited with code 2) and stored no results; "
        f"see why with `dlaas logs {job_id}`" in result.stderr
    )
    assert not (tmp_path / "out").exists()


async def test_download_of_a_failed_job_fetches_what_it_stored_and_exits_1(
    cli: CliOnApi, tmp_path: Path
) -> None:
    job_id = await _failed_job(cli, "learner 1 exited with code 2")
    _store_result(cli, job_id, "partial.pt", b"half")
    result = await cli.dlaas(ADMIN_TOKEN, "download", job_id, "--dest", str(tmp_path / "out"))
    assert result.exit_code == 1, result.output
    assert (tmp_path / "out" / "partial.pt").read_bytes() == b"half"
    assert "partial.pt" in result.stdout
    assert f"job {job_id} FAILED (learner 1 exited with code 2): the 1 file(s) above" in (
        result.stderr
    )


async def test_download_of_a_running_job_names_its_state(cli: CliOnApi, tmp_path: Path) -> None:
    job_id = await _job(cli, S.DEPLOYING, S.RUNNING)
    result = await cli.dlaas(ADMIN_TOKEN, "download", job_id, "--dest", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    assert f"job {job_id} is RUNNING and has no results yet; `dlaas wait {job_id}`" in (
        result.stderr
    )


async def test_download_of_a_completed_job_writes_its_results_quietly(
    cli: CliOnApi, tmp_path: Path
) -> None:
    job_id = await _job(cli, S.DEPLOYING, S.RUNNING, S.COMPLETED)
    _store_result(cli, job_id, "model.pt", b"weights")
    result = await cli.dlaas(ADMIN_TOKEN, "download", job_id, "--dest", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "model.pt").read_bytes() == b"weights"
    assert result.stderr == ""


async def test_download_below_a_file_names_dest_and_the_fix(cli: CliOnApi, tmp_path: Path) -> None:
    job_id = await _job(cli, S.DEPLOYING, S.RUNNING, S.COMPLETED)
    _store_result(cli, job_id, "model.pt", b"weights")
    (tmp_path / "notes.txt").write_text("mine\n")
    for dest, where in [
        (tmp_path / "notes.txt" / "out", f"lies below {tmp_path / 'notes.txt'}, which is a file"),
        (tmp_path / "notes.txt", "is a file"),
    ]:
        result = await cli.dlaas(ADMIN_TOKEN, "download", job_id, "--dest", str(dest))
        assert result.exit_code == 1, result.output
        assert "unexpected error" not in result.stderr
        assert f"--dest {dest} {where}, not a directory; pass --dest a directory" in result.stderr
    assert (tmp_path / "notes.txt").read_text() == "mine\n"


async def test_download_refuses_to_overwrite_unless_forced(cli: CliOnApi, tmp_path: Path) -> None:
    job_id = await _job(cli, S.DEPLOYING, S.RUNNING, S.COMPLETED)
    _store_result(cli, job_id, "model.pt", b"new weights")
    _store_result(cli, job_id, "sub/more.txt", b"new")
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "model.pt").write_bytes(b"my own")
    (out / "sub" / "more.txt").write_bytes(b"mine")

    refused = await cli.dlaas(ADMIN_TOKEN, "download", job_id, "--dest", str(out))
    assert refused.exit_code == 1, refused.output
    assert (
        f"refusing to overwrite {(out / 'model.pt').resolve()} (and 1 more): pass --force"
        in refused.stderr
    )
    assert (out / "model.pt").read_bytes() == b"my own"
    assert (out / "sub" / "more.txt").read_bytes() == b"mine"

    forced = await cli.dlaas(ADMIN_TOKEN, "download", job_id, "--dest", str(out), "--force")
    assert forced.exit_code == 0, forced.output
    assert (out / "model.pt").read_bytes() == b"new weights"
    assert (out / "sub" / "more.txt").read_bytes() == b"new"


async def test_download_refuses_a_file_where_the_results_have_a_folder(
    cli: CliOnApi, tmp_path: Path
) -> None:
    job_id = await _job(cli, S.DEPLOYING, S.RUNNING, S.COMPLETED)
    _store_result(cli, job_id, "sub/more.txt", b"new")
    out = tmp_path / "out"
    out.mkdir()
    (out / "sub").write_text("a file\n")
    result = await cli.dlaas(ADMIN_TOKEN, "download", job_id, "--dest", str(out), "--force")
    assert result.exit_code == 1, result.output
    assert "unexpected error" not in result.stderr
    assert f"{(out / 'sub').resolve()} is a file where the results have a folder" in result.stderr


# -- show --------------------------------------------------------------------------------


async def _checkpoints(cli: CliOnApi, job_id: str, first: int, last: int) -> None:
    async with cli.api.app.state.dlaas.sessions() as session:
        for n in range(first, last + 1):
            name = f"ckpt-{n:012d}"
            detail = {"name": name, "learner": 1, "attempt": 1}
            await jobs.add_event(
                session, job_id, "checkpoint", f"checkpoint {name} committed", detail
            )
        await session.commit()


async def test_show_keeps_a_restart_in_sight_among_many_checkpoints(cli: CliOnApi) -> None:
    job_id = await _job(cli, S.DEPLOYING, S.RUNNING)
    await _checkpoints(cli, job_id, 1, 12)
    async with cli.api.app.state.dlaas.sessions() as session:
        await jobs.add_event(session, job_id, "restart", "learner 2 was killed; restart 1 of 3")
        await session.commit()
    await cli.api.move_job(job_id, S.RECOVERING, S.RUNNING)
    await _checkpoints(cli, job_id, 13, 14)

    shown = await cli.dlaas(ADMIN_TOKEN, "show", job_id)
    assert shown.exit_code == 0, shown.output
    assert "learner 2 was killed; restart 1 of 3" in shown.stdout
    assert "test moves to RECOVERING" in shown.stdout
    assert "test moves to DEPLOYING" in shown.stdout
    assert "committed" not in shown.stdout
    # the manifest keeps the default 2 of the 14 committed
    assert "14 checkpoints taken, the 2 newest kept; newest ckpt-000000000014 at " in shown.stdout

    as_json = await cli.dlaas(ADMIN_TOKEN, "show", job_id, "--output", "json")
    assert as_json.exit_code == 0, as_json.output
    body = json.loads(as_json.stdout)
    kinds = [event["kind"] for event in body["events"]]
    assert kinds == ["submitted", "state", "state", "restart", "state", "state"]
    assert (body["checkpoints"]["count"], body["checkpoints"]["kept"]) == (14, 2)
    assert body["checkpoints"]["newest"]["detail"]["name"] == "ckpt-000000000014"

    # the newest checkpoints do not push the restart out of the last 3 events
    latest = await cli.dlaas(ADMIN_TOKEN, "show", job_id, "--events", "3", "--output", "json")
    latest_kinds = [e["kind"] for e in json.loads(latest.stdout)["events"]]
    assert latest_kinds == ["restart", "state", "state", "checkpoint", "checkpoint"]


async def test_show_of_a_job_without_checkpoints_says_nothing_of_them(cli: CliOnApi) -> None:
    job_id = await _job(cli)
    shown = await cli.dlaas(ADMIN_TOKEN, "show", job_id)
    assert shown.exit_code == 0, shown.output
    assert "job submitted" in shown.stdout
    assert "checkpoint" not in shown.stdout
