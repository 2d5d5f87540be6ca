"""A gang that one learner fails keeps the others' record whole: the learners stopped because
of it still store their last log lines, and only then do the job's credentials go."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from storage.job_redis_users import user_name
from tests.platform import Platform

pytestmark = pytest.mark.e2e

JOB = Path(__file__).with_name("failing_gang_job")
LAST_WORDS = "learner 1: stopped, these are its last words"


def _eventually(
    what: str, check: Callable[[], bool], timeout: float, seen: Callable[[], object] = str
) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen in {timeout} s: {seen()}")
        time.sleep(0.1)


def test_learners_stopped_by_a_failed_gang_store_their_last_lines(
    platform: Platform, tmp_path: Path
) -> None:
    manifest = tmp_path / "failing-gang.yml"
    manifest.write_text(
        "name: failing-gang\nlearners: 2\ncpus: 0.1\nmemory: 256Mi\n"
        "restart_policy: {max_restarts: 0}\n"
        f"framework:\n  name: python\n  command: {json.dumps('python train.py')}\n"
    )
    job = platform.submit(manifest, JOB)
    done = platform.wait_for(job, "FAILED", lambda s: s["job"]["state"] == "FAILED", 120)
    assert "learner 2 failed" in done["job"]["reason"], done["job"]

    def stored(learner: int) -> str:
        return platform.dlaas("logs", job, "--learner", str(learner)).stdout

    _eventually(
        "learner 1's last words stored",
        lambda: LAST_WORDS in stored(1),
        60,
        lambda: (stored(1), platform.show(job)["events"]),
    )
    assert "learner 2: giving up" in stored(2)
    # and then the job's Redis user goes (its gateway tokens with it)
    shared = redis.Redis.from_url(platform.record().redis_url)
    try:
        _eventually(
            "the job's Redis user revoked",
            lambda: user_name(job).encode() not in shared.execute_command("ACL", "USERS"),
            30,
        )
    finally:
        shared.close()
    platform.dlaas("delete", job)
