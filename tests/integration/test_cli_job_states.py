"""What the `dlaas` command says about a job in each state, against the real API served over
a socket: the message a new user reads and the exit code a script sees."""

from __future__ import annotations

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
