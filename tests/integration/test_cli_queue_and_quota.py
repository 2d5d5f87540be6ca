"""`dlaas queue` and `dlaas team quota` against the real API served over a socket, on SQLite
and PostgreSQL: the command runs in a thread while the API answers on the test's loop."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from storage.queue_view import QUEUE_KEY, QueuedJob, QueueView, apublish_queue
from tests.integration.api_harness import ADMIN_TOKEN, ApiUser, CliOnApi, submit


async def test_a_platform_admin_sets_a_quota_and_a_member_reads_it(cli: CliOnApi) -> None:
    member = await cli.api.add_user("member")
    team = await cli.api.add_team("vision", {member: "member"})

    shown = await cli.dlaas(member.token, "team", "quota", team)
    assert shown.exit_code == 0, shown.output
    assert f"team {team}" in shown.output and "weight 1, max priority 0" in shown.output
    assert shown.output.count("unlimited") == 8

    set_ = await cli.dlaas(
        ADMIN_TOKEN,
        *("team", "quota", team, "--gpus", "A100=8", "--gpus", "T4=2", "--cpus", "16"),
        *("--memory", "64GiB", "--jobs", "10", "--borrow-gpus", "A100=4", "--borrow-cpus", "8"),
        *("--weight", "2", "--max-priority", "10"),
    )
    assert set_.exit_code == 0, set_.output
    rows = {line.split()[0]: line.split()[1:] for line in set_.output.splitlines() if line}
    assert rows["GPUS"] == ["A100=8,", "T4=2", "A100=4"]
    assert rows["CPUS"] == ["16", "8"]
    assert rows["MEMORY"] == ["64.0", "GiB", "unlimited"]
    assert rows["JOBS"] == ["10", "unlimited"]
    assert "weight 2, max priority 10" in set_.output

    # options not given keep their values; none clears one
    cleared = await cli.dlaas(ADMIN_TOKEN, "team", "quota", team, "--cpus", "none", "-o", "json")
    assert cleared.exit_code == 0, cleared.output
    quota = json.loads(cleared.output)
    assert quota["cpus"] is None and quota["gpus"] == {"A100": 8, "T4": 2}
    assert quota["borrowing_limit"]["cpus"] == 8.0 and quota["memory"] == 64 * 2**30
    assert (quota["weight"], quota["max_priority"]) == (2.0, 10)
    read = await cli.dlaas(member.token, "team", "quota", team, "--output", "json")
    assert json.loads(read.output) == quota


async def test_quota_refusals_name_the_option_or_the_field(cli: CliOnApi) -> None:
    lead = await cli.api.add_user("lead")
    team = await cli.api.add_team("vision", {lead: "team_admin"})
    refused = await cli.dlaas(lead.token, "team", "quota", team, "--jobs", "100")
    assert refused.exit_code == 1
    assert "only a platform admin may set a team's quota" in refused.output

    bad_gpus = await cli.dlaas(ADMIN_TOKEN, "team", "quota", team, "--gpus", "A100:8")
    assert bad_gpus.exit_code == 1 and "--gpus 'A100:8': use PRODUCT=COUNT" in bad_gpus.output
    bad_memory = await cli.dlaas(ADMIN_TOKEN, "team", "quota", team, "--memory", "64Gx")
    assert bad_memory.exit_code == 1
    assert "memory" in bad_memory.output and "is not understood" in bad_memory.output


async def _job(user: ApiUser, team: str) -> str:
    answer = await submit(user.client, team=team)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


async def test_dlaas_queue_lists_the_callers_waiting_jobs_in_order(cli: CliOnApi) -> None:
    await cli.api.app.state.dlaas.redis.delete(QUEUE_KEY)
    ana, bo = await cli.api.add_user("ana"), await cli.api.add_user("bo")
    vision = await cli.api.add_team("vision", {ana: "member"})
    speech = await cli.api.add_team("speech", {bo: "member"})
    nothing = await cli.dlaas(ana.token, "queue")
    assert nothing.exit_code == 0 and "no queue yet" in nothing.output

    a1, a2, b1 = await _job(ana, vision), await _job(ana, vision), await _job(bo, speech)
    now = datetime.now(UTC)
    # half a minute over, so that the seconds the command takes still read "in 5m"
    in_5m = now + timedelta(minutes=5, seconds=30)
    view = QueueView(
        at=now,
        jobs=[
            QueuedJob(a2, vision, 1, "capacity", "2 A100 free of 4 needed", in_5m),
            QueuedJob(b1, speech, 2, "quota", "team speech uses its quota"),
            QueuedJob(a1, vision, 3, "behind", f"waiting behind job {a2}"),
        ],
    )
    await apublish_queue(cli.api.app.state.dlaas.redis, view)

    listed = await cli.dlaas(ana.token, "queue")
    assert listed.exit_code == 0, listed.output
    lines = [line.split() for line in listed.output.splitlines() if line.strip()]
    assert lines[0] == ["POSITION", "JOB", "NAME", "TEAM", "WAITING", "FOR", "ESTIMATED", "START"]
    assert [line[:4] for line in lines[1:3]] == [
        ["1", a2, "tiny", vision],
        ["3", a1, "tiny", vision],
    ]
    assert lines[1][-2:] == ["in", "5m"] and " ".join(lines[1][4:-2]) == "2 A100 free of 4 needed"
    assert lines[2][-1] == "-" and " ".join(lines[2][4:-1]) == f"waiting behind job {a2}"
    assert "queue as of" in listed.output

    as_json = json.loads((await cli.dlaas(ADMIN_TOKEN, "queue", "--output", "json")).output)
    assert [job["id"] for job in as_json["jobs"]] == [a2, b1, a1]
    assert datetime.fromisoformat(as_json["at"]) == now
    only = json.loads(
        (await cli.dlaas(ADMIN_TOKEN, "queue", "--team", speech, "-o", "json")).output
    )
    assert [(job["id"], job["owner"]) for job in only["jobs"]] == [(b1, bo.name)]
