"""`python -m learner_image.calibrate` as dlaas runs it: one process per learner, gloo between
them, the chief writing calibration.json; and the one line it says without torch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from api.manifest import parse_manifest
from learner_image.rendezvous_port import free_rendezvous_port
from storage.calibration import parse_calibration

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 120.0
STRIPPED = ("RANK", "WORLD_SIZE", "LEARNER_ID", "NUM_LEARNERS", "MASTER_ADDR", "MASTER_PORT")


def _environ(**more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in STRIPPED}
    return {**env, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **more}


def test_two_learners_measure_compute_and_fit_their_link(tmp_path: Path) -> None:
    port = str(free_rendezvous_port())
    learners = []
    for rank in (0, 1):
        result_dir = tmp_path / f"learner-{rank}"
        env = _environ(
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
            WORLD_SIZE="2",
            RANK=str(rank),
            RESULT_DIR=str(result_dir),
        )
        learners.append(
            subprocess.Popen(
                # up to 1 MiB: the fit needs sizes, not the largest, and the test is short
                [sys.executable, "-m", "learner_image.calibrate", "--max-bytes", str(1 << 20)],
                env=env,
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    try:
        outputs = [learner.communicate(timeout=TIMEOUT_S)[0] for learner in learners]
    finally:
        for learner in learners:
            learner.kill()
    assert [learner.returncode for learner in learners] == [0, 0], outputs

    written = tmp_path / "learner-0" / "calibration.json"
    calibration = parse_calibration(written.read_bytes())
    assert not (tmp_path / "learner-1" / "calibration.json").exists()  # the chief's alone
    assert calibration.learners == 2
    assert calibration.device_flops_s > 1e8  # any CPU of this century
    assert calibration.bandwidth_bytes_s is not None and calibration.bandwidth_bytes_s > 1e6
    assert calibration.latency_s is not None and 0 <= calibration.latency_s < 0.1
    assert calibration.torch_version.startswith("2.")
    timed = calibration.measured["all_reduce"]["timings"]
    assert [t["bytes"] for t in timed] == [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20]
    assert all(t["seconds"] > 0 for t in timed)
    speeds = calibration.measured["compute"]["learner_flops_s"]
    assert len(speeds) == 2 and calibration.device_flops_s == min(speeds)
    assert calibration.measured["compute"]["threads"] == 1

    chief = outputs[0]
    assert "calibration of 2 learners" in chief
    assert "link: " in chief and "GB/s" in chief
    assert f"calibrate: wrote {written}" in chief
    assert "calibrate: learner 2 of 2: " in outputs[1] and "wrote" not in outputs[1]


def test_without_torch_it_says_so_in_one_line(tmp_path: Path) -> None:
    # None in sys.modules makes `import torch` fail as a missing package does
    hide_torch = (
        "import runpy, sys; sys.modules['torch'] = None; sys.argv = ['dlaas-calibrate']; "
        "runpy.run_module('learner_image.calibrate', run_name='__main__')"
    )
    done = subprocess.run(
        [sys.executable, "-c", hide_torch],
        env=_environ(RESULT_DIR=str(tmp_path)),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("dlaas-calibrate: PyTorch is not installed")
    assert "install torch" in line
    assert not (tmp_path / "calibration.json").exists()


def test_the_example_job_runs_this_program_on_two_one_cpu_learners() -> None:
    manifest = parse_manifest((ROOT / "examples" / "calibrate" / "manifest.yml").read_bytes())
    assert (manifest.learners, manifest.cpus, manifest.gpus) == (2, 1.0, 0)
    assert manifest.framework.command == "python -m learner_image.calibrate"
