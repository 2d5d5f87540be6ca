"""A job's code reaches nothing but its own job, on the embedded platform run as root (as
compose runs it): each learner's program runs as a uid of its own, and every escape the
attacker job tries with what its environment, filesystem and network give it fails."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.browser.jobs import STEADY_JOB
from tests.e2e.isolated_jobs import ROOT_ONLY, SYSTEM_PYTHON, attack
from tests.platform import Platform

pytestmark = [pytest.mark.e2e, ROOT_ONLY]

ESCAPE_ATTEMPTS = 22


@pytest.fixture(scope="module")
def isolating(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    running = Platform.up(tmp_path_factory.mktemp("isolated-home"), {"DLAAS_AGENT_ISOLATION": "on"})
    try:
        yield running
    finally:
        running.down()


def _manifest(directory: Path, name: str, command: str) -> Path:
    path = directory / f"{name}.yml"
    path.write_text(
        f"name: {name}\nlearners: 1\ncpus: 0.1\nmemory: 256Mi\n"
        f"framework:\n  name: python\n  command: {json.dumps(command)}\n"
    )
    return path


def _submit(platform: Platform, token: str, manifest: Path, model: Path) -> str:
    return platform.dlaas("train", str(manifest), str(model), "--token", token).stdout.strip()


def _wait_state(platform: Platform, token: str, job: str, states: tuple[str, ...]) -> str:
    deadline = time.monotonic() + 180
    state = ""
    while time.monotonic() < deadline:
        with platform.client(token) as client:
            state = str(client.get_job(job)["state"])
        if state in states:
            return state
        if state in ("COMPLETED", "FAILED"):
            logs = platform.dlaas("logs", job, "--token", token).stdout[-3000:]
            with platform.client(token) as client:
                events = client.job_events(job)
            raise AssertionError(f"job {job} ended {state}, not {states}:\n{events}\n{logs}")
        time.sleep(0.25)
    raise AssertionError(f"job {job} is {state}, not {states}, after 180 s")


def test_every_escape_a_job_tries_fails_and_its_own_job_still_works(
    isolating: Platform, tmp_path: Path
) -> None:
    platform = isolating
    created = httpx.post(
        f"{platform.url}/v2/users",
        json={"name": "isolated-newcomer"},
        headers={"Authorization": f"Bearer {platform.token}"},
        timeout=30,
    )
    assert created.status_code == 201 and created.json()["warning"] is None
    victim_owner = platform.create_user("victim-of-attacker")
    steady = f"{SYSTEM_PYTHON} train.py --steps 100000 --step-s 0.2"
    victim = _submit(
        platform, victim_owner.token, _manifest(tmp_path, "victim", steady), STEADY_JOB
    )
    _wait_state(platform, victim_owner.token, victim, ("RUNNING",))
    [victim_learner] = platform.learners(victim)
    attacker_owner = platform.create_user("attacker")
    job, line = attack(platform, attacker_owner, tmp_path, victim)
    results = line["attacker"]
    assert len(results) == ESCAPE_ATTEMPTS
    escaped = {name: got for name, got in results.items() if not got.startswith("blocked")}
    assert not escaped, json.dumps(escaped, indent=1)
    # it ran as a uid of its own, neither root nor the victim's program's
    assert line["uid"] not in (0, victim_learner.get("uid"))
    # its own results are its to keep
    dest = tmp_path / "results"
    platform.dlaas("download", job, "--dest", str(dest), "--token", attacker_owner.token)
    assert any(path.read_text() == "mine\n" for path in dest.rglob("own-result.txt"))
    # the victim ran on untouched
    assert _wait_state(platform, victim_owner.token, victim, ("RUNNING",)) == "RUNNING"
    platform.dlaas("delete", victim, "--token", victim_owner.token)
