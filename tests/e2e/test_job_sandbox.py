"""What one job leaves or runs on a node is out of reach of the next: on the embedded
platform run as root with isolation on, a probe job tries to read another job's runner
files, a secret an earlier job left in /tmp, /var/tmp and /dev/shm under the uid it now
holds, and other jobs' /proc, and fails each time."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.jobs import STEADY_JOB
from tests.e2e.isolated_jobs import (
    ROOT_ONLY,
    SYSTEM_PYTHON,
    escapes,
    probe,
    report,
    submit,
    wait_gone,
    wait_state,
)
from tests.platform import Platform

pytestmark = [pytest.mark.e2e, ROOT_ONLY]

STEADY = f"{SYSTEM_PYTHON} train.py --steps 100000 --step-s 0.2"


@pytest.fixture(scope="module")
def isolating(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    running = Platform.up(tmp_path_factory.mktemp("sandbox-home"), {"DLAAS_AGENT_ISOLATION": "on"})
    try:
        yield running
    finally:
        running.down()


@pytest.fixture(scope="module")
def victim(isolating: Platform, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A job of another user, running."""
    owner = isolating.create_user(f"victim-{secrets.token_hex(3)}")
    job = submit(isolating, owner, tmp_path_factory.mktemp("victim"), STEADY, STEADY_JOB)
    wait_state(isolating, owner, job, ("RUNNING",))
    yield job
    isolating.dlaas("delete", job, "--token", owner.token)


def test_another_jobs_runner_files_are_not_readable(
    isolating: Platform, victim: str, tmp_path: Path
) -> None:
    [learner] = isolating.learners(victim)
    workdir = Path(learner["workdir"])
    runner_log = workdir / "runner.log"
    assert runner_log.stat().st_mode & 0o777 == 0o600
    attacker = isolating.create_user(f"reader-{secrets.token_hex(3)}")
    job = probe(isolating, attacker, tmp_path, {"read": [str(runner_log)]})
    found = report(isolating, attacker, job)
    assert not escapes(found), found  # 0600, and out of sight where mounts are private


def test_what_a_job_leaves_in_tmp_is_not_found_by_the_next_job_with_its_uid(
    isolating: Platform, victim: str, tmp_path: Path
) -> None:
    for job in {str(item["job"]) for item in isolating.learners()} - {victim}:
        wait_gone(isolating, job)  # the planter gets the lowest free uid, and so the finder
    secret = {"name": f"dlaas-left-{secrets.token_hex(4)}", "text": "the first team's secret"}
    first = isolating.create_user(f"planter-{secrets.token_hex(3)}")
    planter = probe(isolating, first, tmp_path, {"plant": secret})
    planted = report(isolating, first, planter)
    assert len(planted["planted"]) == 3
    wait_state(isolating, first, planter, ("COMPLETED",))
    wait_gone(isolating, planter)
    second = isolating.create_user(f"finder-{secrets.token_hex(3)}")
    finder = probe(isolating, second, tmp_path, {"find": secret})
    found = report(isolating, second, finder)
    assert found["uid"] == planted["uid"]  # the same uid, handed to another team's job
    assert not escapes(found), found
    assert len(found["probe"]) == 3


def test_a_job_sees_neither_other_jobs_processes_nor_the_nodes_tmp(
    isolating: Platform, victim: str, tmp_path: Path
) -> None:
    owner = isolating.create_user(f"onlooker-{secrets.token_hex(3)}")
    job = probe(isolating, owner, tmp_path, {"proc": True, "hold": 300})
    found = report(isolating, owner, job)
    assert not escapes(found), found
    # Its temporary directory is its own, in its learner's directory.
    [own] = isolating.learners(job)
    assert found["tmpdir"] == str(Path(own["workdir"]) / "program" / "tmp")
    isolating.dlaas("delete", job, "--token", owner.token)


def test_another_jobs_service_on_loopback_is_out_of_reach_and_its_own_learners_meet(
    isolating: Platform, tmp_path: Path
) -> None:
    owner = isolating.create_user(f"server-{secrets.token_hex(3)}")
    serving = probe(isolating, owner, tmp_path, {"listen": True, "hold": 300})
    port = report(isolating, owner, serving)["listening"]
    attacker = isolating.create_user(f"caller-{secrets.token_hex(3)}")
    job = probe(isolating, attacker, tmp_path, {"connect": [f"127.0.0.1:{port}"]})
    found = report(isolating, attacker, job)
    assert not escapes(found), found
    isolating.dlaas("delete", serving, "--token", owner.token)
    # The learners of one job still reach each other where torch's store would be.
    gang = isolating.create_user(f"gang-{secrets.token_hex(3)}")
    job = probe(isolating, gang, tmp_path, {"rendezvous": True}, learners=2)
    assert wait_state(isolating, gang, job, ("COMPLETED",)) == "COMPLETED"
    logs = isolating.dlaas("logs", job, "--token", gang.token).stdout
    reports = [
        json.loads(line[line.index('{"probe"') :])
        for line in logs.splitlines()
        if '{"probe"' in line
    ]
    assert [r["own"] for r in reports] == ["met", "met"], logs[-2000:]
