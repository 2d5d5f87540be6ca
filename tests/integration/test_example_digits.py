"""The digits example as dlaas runs it: one process per learner, torch.distributed over gloo.

Checks that two learners reach the accuracy the example promises, that checkpoints are
committed by the SDK's protocol, and that a run killed after a checkpoint and resumed ends
with exactly the weights of a run never interrupted.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml

from learner_image.metric_lines import parse_metric_line
from learner_image.rendezvous_port import free_rendezvous_port
from learner_image.sdk.checkpoints import parse_checkpoint_name, verify_checkpoint

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "digits"
MODEL_DIR = EXAMPLE / "model"
DATA_DIR = EXAMPLE / "data"
TIMEOUT_S = 180.0
STRIPPED = ("RANK", "WORLD_SIZE", "LEARNER_ID", "NUM_LEARNERS", "MASTER_ADDR", "MASTER_PORT")


@dataclass
class Learner:
    rank: int
    proc: subprocess.Popen[bytes]
    log: Path
    result_dir: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@dataclass
class Run:
    learners: list[Learner]
    checkpoint_dir: Path

    def wait(self, timeout: float = TIMEOUT_S) -> list[int]:
        deadline = time.monotonic() + timeout
        codes = []
        for learner in self.learners:
            try:
                codes.append(learner.proc.wait(max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                self.kill()
                pytest.fail(f"learner {learner.rank} still running after {timeout}s")
        return codes

    def kill(self) -> None:
        for learner in self.learners:
            if learner.proc.poll() is None:
                learner.proc.kill()
                learner.proc.wait()

    @property
    def chief(self) -> Learner:
        return self.learners[0]


def start(
    root: Path,
    *,
    world_size: int = 2,
    checkpoint_dir: Path | None = None,
    interval_s: float = 1.0,
    args: tuple[str, ...] = (),
) -> Run:
    """Start the example's learners the way a cluster backend does (env per learner)."""
    root.mkdir(parents=True, exist_ok=True)
    checkpoint_dir = checkpoint_dir or root / "checkpoints"
    port = free_rendezvous_port()
    base = {k: v for k, v in os.environ.items() if k not in STRIPPED}
    base.update(
        {
            "TRAINING_ID": "training-digits0001",
            "DATA_DIR": str(DATA_DIR),
            "CHECKPOINT_DIR": str(checkpoint_dir),
            "DLAAS_CHECKPOINT_INTERVAL": str(interval_s),
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": "1",
        }
    )
    learners = []
    for rank in range(world_size):
        env = dict(base, RESULT_DIR=str(root / f"results-{rank}"))
        if world_size > 1:
            env.update(
                {
                    "RANK": str(rank),
                    "WORLD_SIZE": str(world_size),
                    "LEARNER_ID": str(rank + 1),
                    "NUM_LEARNERS": str(world_size),
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(port),
                }
            )
        log = root / f"learner-{rank}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "train.py", *args],
                cwd=MODEL_DIR,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        learners.append(Learner(rank, proc, log, root / f"results-{rank}"))
    return Run(learners, checkpoint_dir)


def weights(path: Path) -> dict[str, torch.Tensor]:
    loaded = torch.load(path, map_location="cpu", weights_only=True)
    assert isinstance(loaded, dict)
    return loaded


def assert_bit_equal(a: Path, b: Path) -> None:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    different = [name for name in wa if not torch.equal(wa[name], wb[name])]
    assert not different, f"tensors differ: {different}"


def committed_steps(checkpoint_dir: Path) -> list[int]:
    steps = []
    for path in sorted(checkpoint_dir.iterdir()):
        step = parse_checkpoint_name(path.name)
        if step is not None and verify_checkpoint(path) is not None:
            steps.append(step)
    return steps


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """An uninterrupted two-learner run with the example's defaults."""
    run = start(tmp_path_factory.mktemp("reference"), interval_s=1.0)
    try:
        assert run.wait() == [0, 0], run.chief.output()[-3000:]
        yield run
    finally:
        run.kill()


def test_two_learners_reach_the_promised_accuracy(reference: Run) -> None:
    chief, other = reference.learners
    metrics = json.loads((chief.result_dir / "metrics.json").read_text())
    assert metrics["test_accuracy"] >= 0.95
    assert metrics["world_size"] == 2
    assert (chief.result_dir / "model.pt").is_file()
    assert not other.result_dir.exists()  # only rank 0 writes results

    for learner in reference.learners:
        lines = learner.output().splitlines()
        assert lines[0] == f"digits: rank {learner.rank} of 2 starting"
        final = [line for line in lines if line.startswith("final accuracy ")]
        assert len(final) == 1 and float(final[0].split()[-1]) >= 0.95


def test_metrics_come_from_the_step_lines_and_a_final_metric_line(reference: Run) -> None:
    lines = reference.chief.output().splitlines()
    manifest = yaml.safe_load((EXAMPLE / "manifest.yml").read_text())
    regex = re.compile(manifest["evaluation_metrics"]["groups"]["training"]["regex"])
    human = [m.groupdict() for line in lines if (m := regex.search(line))]
    parsed = [r for line in lines if (r := parse_metric_line(line)) is not None]
    steps = int(json.loads((reference.chief.result_dir / "metrics.json").read_text())["steps"])
    assert [int(h["step"]) for h in human] == list(range(1, steps + 1))
    assert all(0 <= float(h["accuracy"]) <= 1 for h in human)
    assert len(parsed) == 1
    assert parsed[0]["step"] == steps and parsed[0]["test_accuracy"] >= 0.95


def test_checkpoints_were_committed(reference: Run) -> None:
    steps = int(json.loads((reference.chief.result_dir / "metrics.json").read_text())["steps"])
    names = sorted(p.name for p in reference.checkpoint_dir.iterdir())
    kept = committed_steps(reference.checkpoint_dir)
    assert kept[-1] == steps  # the final checkpoint
    assert len(kept) == len(names) <= 2  # pruned to keep=2, nothing partial left over
    state = torch.load(
        reference.checkpoint_dir / names[-1] / "state.pt", map_location="cpu", weights_only=False
    )
    assert state["step"] == steps and len(state["rng"]) == 2
    assert "committed" in reference.chief.output()


def wait_for_checkpoint(run: Run, min_step: int) -> int:
    pattern = re.compile(r"^digits: checkpoint ckpt-(\d{12}) committed$", re.M)
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        steps = [int(s) for s in pattern.findall(run.chief.output())]
        if steps and steps[-1] >= min_step:
            return steps[-1]
        if any(learner.proc.poll() is not None for learner in run.learners):
            pytest.fail("a learner ended before its first checkpoint:\n" + run.chief.output())
        time.sleep(0.02)
    pytest.fail("no checkpoint committed in time")


def test_kill_and_resume_reproduces_the_uninterrupted_weights(
    reference: Run, tmp_path: Path
) -> None:
    checkpoint_dir = tmp_path / "checkpoints"
    slow = start(
        tmp_path / "first",
        checkpoint_dir=checkpoint_dir,
        interval_s=0.3,
        args=("--step-delay", "0.01"),
    )
    try:
        step = wait_for_checkpoint(slow, min_step=20)
        for learner in slow.learners:
            os.kill(learner.proc.pid, signal.SIGKILL)
        assert slow.wait() == [-signal.SIGKILL, -signal.SIGKILL]
    finally:
        slow.kill()
    assert "final accuracy" not in slow.chief.output()
    resumed_at = committed_steps(checkpoint_dir)[-1]
    assert resumed_at >= step

    resumed = start(tmp_path / "second", checkpoint_dir=checkpoint_dir, interval_s=1.0)
    try:
        assert resumed.wait() == [0, 0], resumed.chief.output()[-3000:]
    finally:
        resumed.kill()
    for learner in resumed.learners:
        assert f"resumed from ckpt-{resumed_at:012d} at step {resumed_at}" in learner.output()
    first_step = re.search(r"^step (\d+) ", resumed.chief.output(), re.M)
    assert first_step is not None and int(first_step.group(1)) == resumed_at + 1
    assert_bit_equal(reference.chief.result_dir / "model.pt", resumed.chief.result_dir / "model.pt")


def test_sigterm_commits_a_checkpoint_and_exits_143(tmp_path: Path) -> None:
    run = start(tmp_path, interval_s=600.0, args=("--step-delay", "0.01"))
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while "step 10 " not in run.chief.output():
            assert time.monotonic() < deadline and run.chief.proc.poll() is None
            time.sleep(0.02)
        os.kill(run.learners[1].proc.pid, signal.SIGTERM)  # one learner is enough
        assert run.wait() == [143, 143]
    finally:
        run.kill()
    stopped = re.search(r"^digits: stopping at step (\d+) on SIGTERM$", run.chief.output(), re.M)
    assert stopped is not None
    assert committed_steps(run.checkpoint_dir) == [int(stopped.group(1))]


def test_single_process_run_without_torch_distributed(tmp_path: Path) -> None:
    run = start(tmp_path, world_size=1, args=("--max-steps", "30"))
    assert run.wait() == [0], run.chief.output()[-3000:]
    out = run.chief.output()
    assert out.startswith("digits: rank 0 of 1 starting\n")
    assert "final accuracy" in out
    metrics = json.loads((run.chief.result_dir / "metrics.json").read_text())
    assert metrics["steps"] == 30 and metrics["world_size"] == 1
    assert committed_steps(run.checkpoint_dir)[-1] == 30
