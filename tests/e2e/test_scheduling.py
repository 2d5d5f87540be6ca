"""The scheduler on the embedded platform with pretend GPUs (`DLAAS_LOCAL_GPUS=2`): a
higher-priority job preempts a running one, which checkpoints, waits QUEUED and later
finishes with its steps continuing; two teams' queued jobs start in turn by share."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Platform, Shown, platform_with

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "digits"
SHORT = "import time\nprint('short job', flush=True)\ntime.sleep({seconds})\nprint('done')\n"


@pytest.fixture(scope="module")
def pretend_gpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    yield from platform_with(
        tmp_path_factory,
        DLAAS_LOCAL_GPUS="2",
        DLAAS_LOCAL_GPU_PRODUCT="T4",
        DLAAS_LOCAL_CPUS="16",
        DLAAS_LOCAL_MEMORY="64GiB",
    )


def _kinds(shown: Shown) -> list[str]:
    return [event["kind"] for event in shown["events"]]


def _short_job(folder: Path, name: str, gpus: int, seconds: float, priority: int = 0) -> Path:
    folder.mkdir(parents=True)
    (folder / "model").mkdir()
    (folder / "model" / "short.py").write_text(SHORT.format(seconds=seconds))
    manifest = folder / "manifest.yml"
    manifest.write_text(
        f"name: {name}\nlearners: 1\ngpus: {gpus}\ncpus: 0.5\nmemory: 256Mi\n"
        f"priority: {priority}\nframework:\n  name: pytorch\n  command: python short.py\n"
    )
    return manifest


def _queue_holding(platform: Platform, jobs: set[str], timeout: float) -> dict[str, Any]:
    """`dlaas queue` once the scheduler has weighed every one of `jobs`."""
    deadline = time.monotonic() + timeout
    while True:
        queue = platform.json("queue")
        assert isinstance(queue, dict)
        if {entry["id"] for entry in queue["jobs"]} >= jobs or time.monotonic() > deadline:
            return queue
        time.sleep(0.25)


def _train(platform: Platform, manifest: Path, *more: str) -> str:
    return platform.dlaas(
        "train", str(manifest), str(manifest.parent / "model"), *more
    ).stdout.strip()


def test_a_higher_priority_job_preempts_one_that_checkpoints_and_later_continues(
    pretend_gpus: Platform, tmp_path: Path
) -> None:
    platform = pretend_gpus
    platform.dlaas("data", "upload", "digits-data", str(EXAMPLE / "data" / "digits.npz"))
    text = (EXAMPLE / "manifest.yml").read_text()
    low_text = (
        text.replace("--epochs 12 --seed 0", "--epochs 4 --seed 0 --step-delay 0.05")
        .replace("interval_s: 3", "interval_s: 1")
        .replace("gpus: 0", "gpus: 1\npriority: -5")
    )
    assert "priority: -5" in low_text and "--step-delay" in low_text
    low_manifest = tmp_path / "low.yml"
    low_manifest.write_text(low_text)
    low = platform.dlaas("train", str(low_manifest), str(EXAMPLE / "model")).stdout.strip()
    platform.wait_for(low, "a checkpoint", lambda s: "checkpoint" in _kinds(s), 180)

    high = _train(platform, _short_job(tmp_path / "high", "high", gpus=2, seconds=2))
    preempted = platform.wait_for(low, "the preemption", lambda s: "preempted" in _kinds(s), 120)
    [asked] = [e for e in preempted["events"] if e["kind"] == "preempting"]
    assert high in asked["reason"], asked
    assert platform.dlaas("wait", high, "--timeout", "120", timeout=150).returncode == 0

    waited = platform.dlaas("wait", low, "--timeout", "300", timeout=330)
    assert waited.returncode == 0, waited.stdout + waited.stderr
    done = platform.json("show", low, "--events", "500")
    assert isinstance(done, dict)
    job = done["job"]
    assert job["state"] == "COMPLETED" and job["restarts"] == 0 and job["attempt"] >= 2, job
    states = [e["to_state"] for e in done["events"] if e.get("to_state")]
    assert states.count("QUEUED") >= 2, states  # submitted, and again when preempted
    logs = platform.dlaas("logs", low).stdout
    assert "digits: resumed from ckpt-" in logs, logs[-3000:]


def test_two_teams_queued_jobs_start_in_turn(pretend_gpus: Platform, tmp_path: Path) -> None:
    platform = pretend_gpus
    teams = [f"team-{name}-{secrets.token_hex(3)}" for name in ("a", "b")]
    for team in teams:
        platform.dlaas("team", "create", team)
    blocker = _train(platform, _short_job(tmp_path / "blocker", "blocker", gpus=2, seconds=600))
    platform.wait_for(blocker, "RUNNING", lambda s: s["job"]["state"] == "RUNNING", 120)
    jobs: dict[str, str] = {}
    for team in teams:  # team a's three jobs all come before team b's
        for n in range(3):
            manifest = _short_job(tmp_path / f"{team}-{n}", f"{team}-{n}", gpus=1, seconds=1)
            jobs[_train(platform, manifest, "--team", team)] = team
    queue = _queue_holding(platform, set(jobs), timeout=60)
    queued = [entry["id"] for entry in queue["jobs"]]
    assert sorted(queued) == sorted(jobs), queue
    assert [jobs[job] for job in queued] == [teams[0], teams[1]] * 3, queue  # in turn

    platform.dlaas("halt", blocker)
    for job in jobs:
        assert platform.dlaas("wait", job, "--timeout", "180", timeout=200).returncode == 0
    admitted = []
    for job, team in jobs.items():
        shown = platform.show(job)
        [admission] = [e for e in shown["events"] if e["kind"] == "admitted"]
        admitted.append((admission["time"], team))
    order = [team for _, team in sorted(admitted)]
    # Two GPUs free at a time: each pair admitted holds one job of each team.
    assert [set(order[i : i + 2]) for i in range(0, 6, 2)] == [set(teams)] * 3, order
