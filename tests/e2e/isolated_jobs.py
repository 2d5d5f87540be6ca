"""What the tests of per-uid isolation on the embedded platform share (and bench/isolation.py
with them): they run only as root, their jobs use the system's Python, and the sandbox probe
job (tests/e2e/sandbox_job) reports what it reached as one JSON line."""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.platform import Platform, User

ROOT_ONLY = pytest.mark.skipif(
    os.geteuid() != 0,
    reason="programs get uids of their own only when the node agent runs as root; "
    "run the tests as root (CI does)",
)
# The jobs need only the standard library: the system's Python, which every uid may run
# (this machine's own interpreter may sit under root's 0700 home).
SYSTEM_PYTHON = "/usr/bin/python3"
PROBE = Path(__file__).with_name("sandbox_job")
ATTACKER = Path(__file__).with_name("attacker_job")


def manifest(directory: Path, name: str, command: str, learners: int = 1) -> Path:
    path = directory / f"{name}-{secrets.token_hex(3)}.yml"
    path.write_text(
        f"name: {name}\nlearners: {learners}\ncpus: 0.1\nmemory: 256Mi\n"
        f"framework:\n  name: python\n  command: {json.dumps(command)}\n"
    )
    return path


def submit(
    platform: Platform, user: User, directory: Path, command: str, model: Path, learners: int = 1
) -> str:
    path = manifest(directory, "sandbox", command, learners)
    return platform.dlaas("train", str(path), str(model), "--token", user.token).stdout.strip()


def probe(
    platform: Platform,
    user: User,
    directory: Path,
    plan: dict[str, Any],
    learners: int = 1,
    python: str = SYSTEM_PYTHON,
) -> str:
    """The sandbox probe job (tests/e2e/sandbox_job/probe.py) with `plan`, run by `python`."""
    command = f"{python} probe.py {json.dumps(json.dumps(plan))}"
    return submit(platform, user, directory, command, PROBE, learners)


def wait_state(platform: Platform, user: User, job: str, states: tuple[str, ...]) -> str:
    deadline = time.monotonic() + 180
    state = ""
    while time.monotonic() < deadline:
        with platform.client(user.token) as client:
            state = str(client.get_job(job)["state"])
        if state in states:
            return state
        if state in ("COMPLETED", "FAILED"):
            logs = platform.dlaas("logs", job, "--token", user.token).stdout[-3000:]
            raise AssertionError(f"job {job} ended {state}, not {states}:\n{logs}")
        time.sleep(0.25)
    raise AssertionError(f"job {job} is {state}, not {states}, after 180 s")


def report(platform: Platform, user: User, job: str, key: str = "probe") -> dict[str, Any]:
    """The JSON line the job printed (one that starts with `{"<key>"`), once it printed it."""
    deadline = time.monotonic() + 180
    start = '{"' + key + '"'
    while time.monotonic() < deadline:
        logs = platform.dlaas("logs", job, "--token", user.token).stdout
        lines = [line for line in logs.splitlines() if line.startswith(start)]
        if lines:
            found: dict[str, Any] = json.loads(lines[0])
            return found
        with platform.client(user.token) as client:
            state = str(client.get_job(job)["state"])
        assert state != "FAILED", f"job {job} failed:\n{logs[-3000:]}"
        time.sleep(0.5)
    raise AssertionError(f"job {job} printed no {key} report after 180 s")


def escapes(found: dict[str, Any], key: str = "probe") -> dict[str, str]:
    """Of the attempts a report lists, those that were not blocked."""
    return {name: got for name, got in found[key].items() if not got.startswith("blocked")}


def wait_gone(platform: Platform, job: str) -> None:
    """Until the node agent has forgotten every learner of `job` (its uid is free again)."""
    deadline = time.monotonic() + 120
    while platform.learners(job):
        assert time.monotonic() < deadline, f"the learners of {job} are still on the node"
        time.sleep(0.25)


def attack(
    platform: Platform, user: User, directory: Path, victim: str, python: str = SYSTEM_PYTHON
) -> tuple[str, dict[str, Any]]:
    """The attacker job (tests/e2e/attacker_job) aimed at the platform and at `victim`, a
    running job of another user's: its id, and its report once it COMPLETED."""
    [victim_learner] = platform.learners(victim)
    record = platform.record()
    targets = {
        "home": str(platform.home),
        "other_job": victim,
        "other_workdir": str(Path(victim_learner["workdir"]) / "program"),
        "redis": f"127.0.0.1:{urlsplit(record.redis_url).port}",
        "agent": record.agent_url,
        "api": platform.url,
    }
    command = f"{python} attack.py {json.dumps(json.dumps(targets))}"
    job = submit(platform, user, directory, command, ATTACKER)
    wait_state(platform, user, job, ("COMPLETED",))
    return job, report(platform, user, job, "attacker")
