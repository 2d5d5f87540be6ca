"""The cascade SVM example as dlaas runs it: one process per learner, torch.distributed over
gloo, checkpoints after every round, and the final model's accuracy beside a single fit's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import joblib
import numpy as np
import pytest

from learner_image.rendezvous_port import free_rendezvous_port
from learner_image.sdk.checkpoints import parse_checkpoint_name, verify_checkpoint

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MODEL_DIR = EXAMPLES / "svm" / "model"
DATA_DIR = EXAMPLES / "digits" / "data"
TIMEOUT_S = 120.0
STRIPPED = ("RANK", "WORLD_SIZE", "LEARNER_ID", "NUM_LEARNERS", "MASTER_ADDR", "MASTER_PORT")


@dataclass
class Run:
    procs: list[subprocess.Popen[bytes]]
    logs: list[Path]
    results: list[Path]
    checkpoint_dir: Path

    def wait(self) -> list[int]:
        deadline = time.monotonic() + TIMEOUT_S
        try:
            return [p.wait(max(0.1, deadline - time.monotonic())) for p in self.procs]
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"learners still running after {TIMEOUT_S}s:\n{self.output(0)}")

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def output(self, rank: int) -> str:
        return self.logs[rank].read_text(errors="replace")

    def metrics(self) -> dict[str, float]:
        loaded = json.loads((self.results[0] / "metrics.json").read_text())
        assert isinstance(loaded, dict)
        return loaded


def start(root: Path, checkpoint_dir: Path, *args: str, world_size: int = 2) -> Run:
    """Start the example's learners the way a cluster backend does (env per learner)."""
    root.mkdir(parents=True, exist_ok=True)
    port = free_rendezvous_port()
    base = {k: v for k, v in os.environ.items() if k not in STRIPPED}
    base.update(
        {
            "TRAINING_ID": "training-svm00001",
            "DATA_DIR": str(DATA_DIR),
            "CHECKPOINT_DIR": str(checkpoint_dir),
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": "1",
        }
    )
    run = Run([], [], [], checkpoint_dir)
    for rank in range(world_size):
        env = dict(
            base,
            RESULT_DIR=str(root / f"results-{rank}"),
            RANK=str(rank),
            WORLD_SIZE=str(world_size),
            LEARNER_ID=str(rank + 1),
            NUM_LEARNERS=str(world_size),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
        log = root / f"learner-{rank}.log"
        with open(log, "wb") as out:
            run.procs.append(
                subprocess.Popen(
                    [sys.executable, "train.py", *args],
                    cwd=MODEL_DIR,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )
        run.logs.append(log)
        run.results.append(root / f"results-{rank}")
    return run


def committed_rounds(checkpoint_dir: Path) -> list[int]:
    return sorted(
        step
        for path in checkpoint_dir.iterdir()
        if (step := parse_checkpoint_name(path.name)) is not None
        and verify_checkpoint(path) is not None
    )


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    root = tmp_path_factory.mktemp("svm-reference")
    run = start(root, root / "checkpoints")
    try:
        assert run.wait() == [0, 0], run.output(0)[-3000:]
        yield run
    finally:
        run.kill()


def test_two_learners_match_a_single_process_fit(reference: Run) -> None:
    metrics = reference.metrics()
    assert metrics["world_size"] == 2 and metrics["rounds"] == 2
    assert metrics["test_accuracy"] >= 0.93
    assert metrics["test_accuracy"] >= metrics["single_process_accuracy"] - 0.01, metrics
    assert metrics["agreement_with_single_process"] >= 0.98, metrics
    # samples were eliminated: the final fit saw well under the whole training set
    assert metrics["survivors"] < 0.6 * metrics["training_samples"], metrics
    assert not reference.results[1].exists()  # only the chief writes results

    model = joblib.load(reference.results[0] / "model.joblib")
    with np.load(DATA_DIR / "digits.npz") as npz:
        x = npz["images"][-300:].reshape(300, -1) / 16.0
        y = npz["labels"][-300:]
    assert float((model.predict(x) == y).mean()) == pytest.approx(metrics["test_accuracy"])
    assert "final accuracy" in reference.output(0)


def test_every_round_is_checkpointed(reference: Run) -> None:
    assert committed_rounds(reference.checkpoint_dir) == [1, 2]
    out = reference.output(0)
    assert "round 1 sets 2 survivors " in out and "round 2 sets 1 survivors " in out


def test_a_restart_resumes_after_the_last_committed_round(reference: Run, tmp_path: Path) -> None:
    checkpoint_dir = tmp_path / "checkpoints"
    first = start(tmp_path / "first", checkpoint_dir, "--round-delay", "30")
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while "checkpoint ckpt-000000000001 committed" not in first.output(0):
            assert time.monotonic() < deadline and first.procs[0].poll() is None, first.output(0)
            time.sleep(0.05)
        for proc in first.procs:
            os.kill(proc.pid, signal.SIGKILL)
        first.wait()
    finally:
        first.kill()
    assert committed_rounds(checkpoint_dir) == [1]

    second = start(tmp_path / "second", checkpoint_dir)
    try:
        assert second.wait() == [0, 0], second.output(0)[-3000:]
    finally:
        second.kill()
    assert "resumed after round 1 (2 survivor sets)" in second.output(0)
    assert "round 1 sets" not in second.output(0)  # the shards were not fitted again
    assert second.metrics()["test_accuracy"] == reference.metrics()["test_accuracy"]
    assert second.metrics()["survivors"] == reference.metrics()["survivors"]


def test_sigterm_between_rounds_checkpoints_and_exits_143(tmp_path: Path) -> None:
    run = start(tmp_path, tmp_path / "checkpoints", "--round-delay", "2")
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while "round 1 sets" not in run.output(0):
            assert time.monotonic() < deadline and run.procs[0].poll() is None, run.output(0)
            time.sleep(0.05)
        os.kill(run.procs[1].pid, signal.SIGTERM)  # one learner is enough
        assert run.wait() == [143, 143], run.output(0)
    finally:
        run.kill()
    assert "svm: stopping after round 1 on SIGTERM" in run.output(0)
    assert committed_rounds(run.checkpoint_dir) == [1]
