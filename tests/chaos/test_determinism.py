"""The example job, killed and resumed by the platform, ends with exactly the weights of an
uninterrupted run: restarts lose nothing and replay nothing."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.chaos import processes
from tests.chaos.jobs import events, finish, runner_pid
from tests.e2e.conftest import Platform

if TYPE_CHECKING:
    import torch

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "digits"

pytestmark = pytest.mark.chaos


def _manifest(directory: Path) -> Path:
    text = (EXAMPLE / "manifest.yml").read_text()
    short = text.replace(
        "--epochs 12 --seed 0", "--epochs 12 --seed 0 --max-steps 40 --step-delay 0.05"
    ).replace("interval_s: 3", "interval_s: 1")
    assert short.count("--max-steps") == 1 and "interval_s: 1" in short
    path = directory / "digits.yml"
    path.write_text(short)
    return path


def _weights(platform: Platform, job: str, directory: Path) -> dict[str, torch.Tensor]:
    import torch

    dest = directory / job
    platform.dlaas("download", job, "--dest", str(dest))
    state: dict[str, torch.Tensor] = torch.load(dest / "model.pt", weights_only=True)
    return state


def test_weights_after_a_kill_and_resume_equal_those_of_an_uninterrupted_run(
    platform: Platform, tmp_path: Path
) -> None:
    import torch

    platform.dlaas("data", "upload", "digits-data", str(EXAMPLE / "data" / "digits.npz"))
    manifest = _manifest(tmp_path)
    steady = platform.submit(manifest, EXAMPLE / "model")
    killed = platform.submit(manifest, EXAMPLE / "model")
    platform.wait_for(killed, "a checkpoint", lambda s: bool(events(s, "checkpoint")), 120)
    processes.kill_training(runner_pid(platform, killed, 1))

    for job in (steady, killed):
        assert finish(platform, job, timeout=180)["job"]["state"] == "COMPLETED"
    resumed = events(platform.show(killed), "resumed")
    assert resumed and resumed[0]["detail"]["attempt"] == 2, resumed
    assert platform.show(steady)["job"]["attempt"] == 1

    expected, got = _weights(platform, steady, tmp_path), _weights(platform, killed, tmp_path)
    assert expected.keys() == got.keys()
    for name, tensor in expected.items():
        assert torch.equal(tensor, got[name]), f"{name} differs after the kill and resume"
