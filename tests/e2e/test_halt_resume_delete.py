"""Halt keeps the latest checkpoint, resume restarts from it, delete removes everything."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.e2e.conftest import Platform, Shown

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "digits"

pytestmark = pytest.mark.e2e


def _slow_manifest(tmp_path: Path) -> Path:
    text = (EXAMPLE / "manifest.yml").read_text()
    slow = text.replace("--epochs 12 --seed 0", "--epochs 12 --seed 0 --step-delay 0.05")
    assert slow != text
    path = tmp_path / "manifest.yml"
    path.write_text(slow.replace("interval_s: 3", "interval_s: 1"))
    return path


def _kinds(shown: Shown) -> list[str]:
    return [event["kind"] for event in shown["events"]]


def test_halt_then_resume_restarts_from_the_checkpoint_and_completes(
    platform: Platform, tmp_path: Path
) -> None:
    platform.dlaas("data", "upload", "digits-data", str(EXAMPLE / "data" / "digits.npz"))
    job_id = platform.dlaas("train", str(_slow_manifest(tmp_path)), str(EXAMPLE / "model"))
    job_id_text = job_id.stdout.strip()
    platform.wait_for(job_id_text, "a checkpoint", lambda s: "checkpoint" in _kinds(s), 120)

    platform.dlaas("halt", job_id_text)
    halted = platform.wait_for(job_id_text, "HALTED", lambda s: s["job"]["state"] == "HALTED", 90)
    assert "halt_requested" in _kinds(halted)
    resumed_from = platform.dlaas("resume", job_id_text)
    assert resumed_from.returncode == 0
    # The job stays HALTED until a worker takes the resume up, and `dlaas wait` takes HALTED
    # for an end: wait for the resume to be under way first.
    platform.wait_for(job_id_text, "the resume", lambda s: s["job"]["state"] != "HALTED", 90)
    waited = platform.dlaas("wait", job_id_text, "--timeout", "240", timeout=300)
    assert waited.returncode == 0, waited.stdout + waited.stderr

    logs = platform.dlaas("logs", job_id_text).stdout
    assert "resumes from checkpoint ckpt-" in logs, logs[-3000:]
    assert "digits: resumed from ckpt-" in logs
    assert "final accuracy" in logs
    done = platform.json("show", job_id_text, "--events", "200")
    assert isinstance(done, dict)
    assert done["job"]["state"] == "COMPLETED"
    assert done["job"]["attempt"] >= 2


def test_delete_stops_the_learners_and_hides_the_job(platform: Platform, tmp_path: Path) -> None:
    platform.dlaas("data", "upload", "digits-data", str(EXAMPLE / "data" / "digits.npz"))
    job_id = platform.dlaas("train", str(_slow_manifest(tmp_path)), str(EXAMPLE / "model"))
    job = job_id.stdout.strip()
    platform.wait_for(job, "RUNNING", lambda s: s["job"]["state"] == "RUNNING", 120)
    # Followed in one shell, deleted from another: the follow ends at once, saying so.
    follow = platform.follow(job)
    try:
        assert follow.stdout is not None
        assert follow.stdout.readline(), "the follow printed nothing"  # it is following now
        platform.dlaas("delete", job)
        out, err = follow.communicate(timeout=60)
    finally:
        follow.kill()
    assert follow.returncode == 1, out[-2000:] + err
    assert f"job {job} was deleted" in err
    missing = platform.dlaas("show", job, check=False)
    assert missing.returncode == 1
    assert "was deleted" in missing.stderr
    objects = platform.home / "objects" / "jobs" / job
    deadline = time.monotonic() + 60
    while objects.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not objects.exists(), "the deleted job's objects are still stored"
