"""The platform's own processes die or restart; no job is stuck, lost, duplicated or orphaned.

Each service is crashed with SIGKILL (as an OOM kill or a lost node would) and started again
with the command `dlaas up` gave it, as a supervisor would.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from cli.embedded import PlatformError
from tests.chaos import processes
from tests.chaos.jobs import (
    assert_completed_exactly,
    events,
    in_state,
    runner_pid,
    submit_stepper,
    training,
)
from tests.e2e.conftest import Platform

pytestmark = pytest.mark.chaos


def _jobs_named(platform: Platform, name: str) -> list[str]:
    listed = platform.json("list")
    assert isinstance(listed, dict)
    return [job["id"] for job in listed["jobs"] if job["name"] == name]


def _learners_per_attempt(platform: Platform, job: str) -> dict[int, int]:
    created = events(platform.show(job), "learners_created")
    counts: dict[int, int] = {}
    for event in created:
        for name in event["detail"]["names"]:
            attempt = int(name.rsplit("-a", 1)[1])
            counts[attempt] = counts.get(attempt, 0) + 1
    return counts


def test_a_worker_killed_mid_deploy_leaves_one_job_with_one_gang(
    platform: Platform, tmp_path: Path
) -> None:
    agent = platform.record().pids["agent"]
    os.kill(agent, signal.SIGSTOP)  # the worker's request to create learners hangs
    try:
        job = submit_stepper(platform, tmp_path, name="worker-mid-deploy", steps=100)
        platform.wait_for(job, "DEPLOYING", in_state("DEPLOYING"), 30, poll_s=0.05)
        time.sleep(0.3)
        platform.stop_service("worker", kill=True)
    finally:
        os.kill(agent, signal.SIGCONT)
    platform.start_service("worker")

    done = assert_completed_exactly(platform, job, 100, tmp_path)
    assert _jobs_named(platform, "worker-mid-deploy") == [job]
    assert done["job"]["attempt"] == 1 and not events(done, "restart")
    assert set(_learners_per_attempt(platform, job)) <= {1}


def test_a_worker_killed_mid_restart_restarts_the_job_once(
    platform: Platform, tmp_path: Path
) -> None:
    job = submit_stepper(
        platform, tmp_path, name="worker-mid-restart", steps=150, learners=2, term_grace=10
    )
    platform.wait_for(job, "a checkpoint", lambda s: bool(events(s, "checkpoint")), 60)
    processes.kill_training(runner_pid(platform, job, 1, learner=1))
    # Learner 2 ignores SIGTERM for its grace: the worker's restart waits for it to stop.
    platform.wait_for(job, "RECOVERING", in_state("RECOVERING"), 30, poll_s=0.05)
    platform.stop_service("worker", kill=True)
    platform.start_service("worker")

    done = assert_completed_exactly(platform, job, 150, tmp_path)
    assert done["job"]["attempt"] == 2
    assert len(events(done, "restart")) == 1
    stopped = [e for e in events(done, "learner_exit") if e["detail"]["learner"] == 2]
    assert stopped[0]["reason"].startswith("learner 2 stopped: "), stopped  # not failed
    assert _learners_per_attempt(platform, job) == {1: 2, 2: 2}


def test_an_api_crash_loses_no_job_and_no_log_line(platform: Platform, tmp_path: Path) -> None:
    steps = 200
    job = submit_stepper(platform, tmp_path, name="api-crash", steps=steps)
    platform.wait_for(job, "RUNNING", training(1), 60)
    follower = platform.follow(job)
    assert follower.stdout is not None and follower.stderr is not None
    output: list[str] = [follower.stdout.readline()]  # the follow is connected and streaming
    reader = threading.Thread(target=lambda: output.append(follower.stdout.read()))  # type: ignore[union-attr]
    reader.start()
    platform.stop_service("api", kill=True)
    refused = platform.dlaas("list", check=False)
    assert refused.returncode != 0 and "127.0.0.1" in refused.stderr, refused
    time.sleep(1)  # the API stays down a while, as a crashed one does
    platform.start_service("api")
    second = submit_stepper(platform, tmp_path, name="api-crash-after", steps=20)

    follower.wait(timeout=180)
    reader.join(30)
    out, err = "".join(output), follower.stderr.read()
    told = f"stdout:\n{out[-2000:]}\nstderr:\n{err[-2000:]}"
    assert follower.returncode == 0, told
    numbered = [line.split()[1] for line in out.splitlines() if line.startswith("step ")]
    assert numbered == [str(n) for n in range(1, steps + 1)], told
    assert_completed_exactly(platform, job, steps, tmp_path)
    assert_completed_exactly(platform, second, 20, tmp_path)


def test_a_redis_crash_is_survived_by_jobs_running_and_jobs_submitted(
    platform: Platform, tmp_path: Path
) -> None:
    steps = 250
    job = submit_stepper(platform, tmp_path, name="redis-crash", steps=steps)
    platform.wait_for(job, "a checkpoint", lambda s: bool(events(s, "checkpoint")), 60)
    platform.stop_service("redis", kill=True)
    time.sleep(3)  # longer than a heartbeat period: no learner may be judged hung for it
    platform.start_service("redis")
    second = submit_stepper(platform, tmp_path, name="redis-crash-after", steps=20)

    done = assert_completed_exactly(platform, job, steps, tmp_path)
    assert done["job"]["attempt"] == 1, events(done, "restart")
    assert_completed_exactly(platform, second, 20, tmp_path)


def test_the_reconcile_stops_a_learner_of_a_deleted_job(platform: Platform, tmp_path: Path) -> None:
    job = submit_stepper(platform, tmp_path, name="deleted-drift", steps=500)
    platform.wait_for(job, "RUNNING", training(1), 60)
    platform.dlaas("delete", job)
    # A learner the database knows nothing of, as a lost delete or a node back from a
    # partition would leave behind.
    body = {"job": job, "learner": 1, "attempt": 1, "num_learners": 1, "command": ["sleep", "60"]}
    record = platform.record()
    deadline = time.monotonic() + 30
    while platform.learners(job) and time.monotonic() < deadline:
        time.sleep(0.1)
    created = httpx.put(
        f"{record.agent_url}/learners/dlaas-{job}-learner-1-a1",
        json=body,
        headers=record.agent_headers(),
        timeout=10,
    )
    assert created.status_code == 201, created.text
    stray = int(created.json()["pid"])

    assert processes.wait_gone(stray, timeout_s=20), platform.service_logs()
    assert platform.learners(job) == []


def test_the_reconcile_recovers_a_running_job_whose_learners_are_gone(
    platform: Platform, tmp_path: Path
) -> None:
    steps = 150
    job = submit_stepper(platform, tmp_path, name="lost-node", steps=steps, heartbeat_timeout_s=60)
    platform.wait_for(job, "a checkpoint", lambda s: bool(events(s, "checkpoint")), 60)
    runner = runner_pid(platform, job, 1)
    # The node is lost: its agent, its learners and the agent's memory of them.
    platform.stop_service("agent", kill=True)
    processes.kill_session(runner)
    (platform.home / "agent" / "agent-learners.json").unlink()
    platform.start_service("agent")

    done = assert_completed_exactly(platform, job, steps, tmp_path)
    [restart] = events(done, "restart")
    assert restart["detail"]["failure"]["cause"] == "vanished", restart
    assert (
        events(done, "resumed")[0]["detail"]["name"] == restart["detail"]["failure"]["checkpoint"]
    )


def test_a_service_that_runs_is_not_started_twice(platform: Platform) -> None:
    with pytest.raises(PlatformError, match="runs already"):
        platform.start_service("monitor")


def test_halt_and_resume_each_survive_a_worker_crash(platform: Platform, tmp_path: Path) -> None:
    steps = 150
    job = submit_stepper(platform, tmp_path, name="halt-resume-crash", steps=steps, term_grace=1)
    platform.wait_for(job, "a checkpoint", lambda s: bool(events(s, "checkpoint")), 60)
    agent = platform.record().pids["agent"]
    os.kill(agent, signal.SIGSTOP)  # the worker's request to stop the learners hangs
    try:
        platform.dlaas("halt", job)
        platform.wait_for(job, "the halt", lambda s: bool(events(s, "halt_requested")), 30)
        time.sleep(0.3)
        platform.stop_service("worker", kill=True)
    finally:
        os.kill(agent, signal.SIGCONT)
    platform.start_service("worker")
    platform.wait_for(job, "HALTED", in_state("HALTED"), 60)

    platform.dlaas("resume", job)
    resuming = in_state("QUEUED", "DEPLOYING", "DOWNLOADING", "RUNNING")
    platform.wait_for(job, "the resume under way", resuming, 30, poll_s=0.02)
    platform.stop_service("worker", kill=True)
    platform.start_service("worker")

    done = assert_completed_exactly(platform, job, steps, tmp_path)
    assert not events(done, "restart"), events(done, "restart")
    [resumed] = events(done, "resumed")
    assert resumed["detail"]["attempt"] == 2
    assert _jobs_named(platform, "halt-resume-crash") == [job]


def test_halt_and_resume_each_survive_a_redis_and_an_api_crash(
    platform: Platform, tmp_path: Path
) -> None:
    steps = 150
    job = submit_stepper(platform, tmp_path, name="halt-resume-redis", steps=steps, term_grace=1)
    platform.wait_for(job, "a checkpoint", lambda s: bool(events(s, "checkpoint")), 60)
    platform.stop_service("redis", kill=True)
    platform.dlaas("halt", job)  # kept in the database; the nudge to the workers is lost
    time.sleep(1)
    platform.start_service("redis")
    platform.wait_for(job, "HALTED", in_state("HALTED"), 60)

    platform.stop_service("api", kill=True)
    platform.start_service("api")
    platform.dlaas("resume", job)
    platform.stop_service("redis", kill=True)
    time.sleep(1)
    platform.start_service("redis")

    done = assert_completed_exactly(platform, job, steps, tmp_path)
    [resumed] = events(done, "resumed")
    assert resumed["detail"]["attempt"] == 2
    assert _jobs_named(platform, "halt-resume-redis") == [job]
