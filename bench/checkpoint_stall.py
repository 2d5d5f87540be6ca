"""How long checkpointing stalls training: `save_checkpoint` of a 500 MB state every 2 s.

One process trains on a state of float32 tensors (`--state-mb`, default 500): every step adds
to a 4 MB slice of one tensor (the next one each step) and runs matmuls (calibrated so that a
step takes about `--step-ms`, default 30 ms), with torch on one thread, so the background
writer has the machine's other core. Phases of `--phase-s` seconds (default 10) alternate,
`--rounds` times (default 4), the order flipped every round so that drift cancels: training
alone (the baseline) and training that calls `save_checkpoint(state, step)` every
`--interval` s (default 2) into a temporary CHECKPOINT_DIR (keep 2). A first, unmeasured
checkpointing phase holds the process's first saves: they allocate the copy buffers that
later saves reuse (`first_saves_blocked_ms` reports them). Between phases the pending save is
waited for, outside any phase.

Figures:
- `state_copy_ms`: one copy of the state into tensors already allocated (median of 5),
  the floor for a copy taken in the training thread; `state_clone_ms`: the same with fresh
  memory (`clone()`, median of 3), what a copy costs without reused buffers;
- `save_blocked_ms_p50`, `_p95`, `_max`: how long `save_checkpoint` held the training thread,
  measured phases only; target p50 <= 2 x `state_copy_ms`;
- `training_overhead`: mean step time in the checkpointing phases / in the baseline ones - 1
  (each step's time includes a save it made); target <= 0.05;
- `checkpoints_committed` (target >= 10), `replaced`, `failed`: what became of the saves of
  the measured phases; `background_save_s_p50`: handing over -> committed, as seen at the next
  step boundary;
- `restorable_after_kill`: a subprocess saves the same-sized state (step 1, committed), then
  hands step 2 to the background writer and is SIGKILLed once half of step 2's `state.pt` is
  on disk; `load_checkpoint` must then return step 1, whole (every value checked).

Run from the repository root: `python -m bench.checkpoint_stall` (about 2 minutes). The last
line is the FINAL line, one JSON object `{"bench": "checkpoint_stall", ...}`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bench import _cpu_meter
from bench._latency_stats import median, percentile, rounded
from bench._small import parse_with_small
from learner_image import sdk

TARGET_BLOCKED_RATIO = 2.0  # save_blocked_ms_p50 / state_copy_ms
TARGET_OVERHEAD = 0.05
TARGET_COMMITTED = 10
TENSORS = 4
SLICE = 1 << 20  # floats a step adds to: 4 MB
MATMUL_N = 256


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--state-mb", type=int, default=500)
    p.add_argument("--step-ms", type=float, default=30.0)
    p.add_argument("--interval", type=float, default=2.0, help="seconds between saves")
    p.add_argument("--phase-s", type=float, default=10.0)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--warmup-s", type=float, default=6.0)
    return parse_with_small(
        p, {"state_mb": 20, "interval": 0.5, "phase_s": 1.5, "rounds": 1, "warmup_s": 1.0}
    )


def make_state(state_mb: int, fill: float = 0.0) -> dict[str, Any]:
    per_tensor = state_mb * 1_000_000 // TENSORS // 4
    state: dict[str, Any] = {f"w{i}": torch.full((per_tensor,), fill) for i in range(TENSORS)}
    state["step"] = 0
    return state


class Trainer:
    def __init__(self, state: dict[str, Any], step_ms: float) -> None:
        self.state = state
        self.tensors = [state[f"w{i}"] for i in range(TENSORS)]
        self.a = torch.randn(MATMUL_N, MATMUL_N)
        self.m = torch.randn(MATMUL_N, MATMUL_N) / MATMUL_N
        self.out = torch.empty(MATMUL_N, MATMUL_N)
        self.step = 0
        self.reps = 0
        update_s = self._one_step_s()
        self.reps = 1
        matmul_s = self._one_step_s() - update_s
        self.reps = max(1, round((step_ms / 1000 - update_s) / max(matmul_s, 1e-6)))

    def _one_step_s(self) -> float:
        """The median time of a step with the current `reps` (the state's update is made once
        a step, the matmul `reps` times: both are timed to calibrate `reps`)."""
        times = []
        for _ in range(30):
            start = time.perf_counter()
            self.train()
            times.append(time.perf_counter() - start)
        return median(times[5:])

    def train(self) -> None:
        self.step += 1
        t = self.tensors[self.step % TENSORS]
        start = (self.step * SLICE) % (t.numel() - SLICE)
        t[start : start + SLICE].add_(1e-3)
        for _ in range(self.reps):
            torch.mm(self.a, self.m, out=self.out)
        self.state["step"] = self.step


@dataclass
class Phase:
    checkpointing: bool
    own_cores: float = 0.0  # this process: training and the background writer
    others_cores: float = 0.0  # everything else the machine ran meanwhile
    step_s: list[float] = field(default_factory=list)
    blocked_s: list[float] = field(default_factory=list)
    saves: list[sdk.PendingCheckpoint] = field(default_factory=list)
    save_s: list[float] = field(default_factory=list)  # handed over -> seen done


def run_phase(trainer: Trainer, duration: float, interval: float, checkpointing: bool) -> Phase:
    phase = Phase(checkpointing)
    watching: list[tuple[sdk.PendingCheckpoint, float]] = []
    cpu_before, own_before = _cpu_meter.snapshot(), time.process_time()
    start = time.perf_counter()
    next_save = start
    while (now := time.perf_counter()) - start < duration:
        trainer.train()
        if checkpointing and now >= next_save:
            handed = time.perf_counter()
            saving = sdk.save_checkpoint(trainer.state, trainer.step)
            phase.blocked_s.append(time.perf_counter() - handed)
            assert saving is not None
            phase.saves.append(saving)
            watching.append((saving, handed))
            next_save += interval
        for saving, handed in [w for w in watching if w[0].done()]:
            if saving.status == "committed":
                phase.save_s.append(time.perf_counter() - handed)
            watching.remove((saving, handed))
        phase.step_s.append(time.perf_counter() - now)
    wall = time.perf_counter() - start
    machine = _cpu_meter.cores_used(cpu_before, _cpu_meter.snapshot(), ())["machine"]
    phase.own_cores = (time.process_time() - own_before) / wall
    phase.others_cores = max(0.0, machine - phase.own_cores)
    sdk.wait_for_checkpoints()  # outside the phase: nothing of it runs into the next
    done = time.perf_counter()
    phase.save_s += [done - handed for saving, handed in watching if saving.status == "committed"]
    return phase


def copy_times(state: dict[str, Any]) -> tuple[float, float]:
    """(copy into allocated tensors, clone into fresh memory) of the whole state, seconds."""
    tensors = [state[f"w{i}"] for i in range(TENSORS)]
    targets = [torch.empty_like(t) for t in tensors]
    for dst, src in zip(targets, tensors, strict=True):
        dst.copy_(src)  # touch every page once
    copies = []
    for _ in range(5):
        start = time.perf_counter()
        for dst, src in zip(targets, tensors, strict=True):
            dst.copy_(src)
        copies.append(time.perf_counter() - start)
    del targets
    clones = []
    for _ in range(3):
        start = time.perf_counter()
        cloned = [t.clone() for t in tensors]
        clones.append(time.perf_counter() - start)
        del cloned
    return median(copies), median(clones)


KILLED_PROGRAM = """
import sys, time
import torch
from learner_image import sdk
from bench.checkpoint_stall import make_state

state = make_state(int(sys.argv[1]), fill=1.0)
state["step"] = 1
sdk.save_checkpoint(state, 1, blocking=True)
for i in range(4):
    state[f"w{i}"].fill_(2.0)
state["step"] = 2
sdk.save_checkpoint(state, 2)
print("handed over", flush=True)
while True:
    time.sleep(0.01)
"""


def restorable_after_kill(state_mb: int, root: Path) -> dict[str, Any]:
    """SIGKILL a program in the middle of its background save; is the older checkpoint whole?"""
    ckpt_dir = root / "killed"
    env = {**os.environ, "CHECKPOINT_DIR": str(ckpt_dir), "DLAAS_CHECKPOINT_KEEP": "2"}
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_PROGRAM, str(state_mb)],
        env=env,
        cwd=Path(__file__).resolve().parents[1],
    )
    partial = ckpt_dir / f".tmp-ckpt-2-{proc.pid}" / "state.pt"
    half = state_mb * 1_000_000 // 2
    deadline = time.monotonic() + 300
    size = 0
    try:
        while size < half:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the program ended or stalled (exit {proc.poll()})")
            try:
                size = partial.stat().st_size
            except FileNotFoundError:
                size = 0
            time.sleep(0.001)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        proc.kill()
        proc.wait()
    os.environ["CHECKPOINT_DIR"] = str(ckpt_dir)
    loaded = sdk.load_checkpoint()
    whole = (
        loaded is not None
        and loaded.step == 1
        and loaded.state is not None
        and all(bool((loaded.state[f"w{i}"] == 1.0).all()) for i in range(TENSORS))
        and loaded.state["w0"].numel() * 4 * TENSORS == state_mb * 1_000_000
    )
    return {
        "restorable_after_kill": whole,
        "killed_with_bytes_written": size,
        "restored_step_after_kill": None if loaded is None else loaded.step,
    }


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="dlaas-bench-ckpt-"))
    for name in ("RANK", "WORLD_SIZE", "LEARNER_ID", "DLAAS_RESTART_SCOPE"):
        os.environ.pop(name, None)
    os.environ["CHECKPOINT_DIR"] = str(root / "checkpoints")
    os.environ["DLAAS_CHECKPOINT_KEEP"] = "2"
    figures: dict[str, Any] = {"bench": "checkpoint_stall", "state_mb": args.state_mb}
    try:
        state = make_state(args.state_mb)
        copy_s, clone_s = copy_times(state)
        figures["state_copy_ms"] = rounded(copy_s * 1000, 1)
        figures["state_clone_ms"] = rounded(clone_s * 1000, 1)
        print(f"state copy {copy_s * 1000:.1f} ms, clone {clone_s * 1000:.1f} ms", flush=True)
        trainer = Trainer(state, args.step_ms)
        print(f"matmuls per step: {trainer.reps}", flush=True)

        warmup = run_phase(trainer, args.warmup_s, args.interval, checkpointing=True)
        figures["first_saves_blocked_ms"] = [round(s * 1000, 1) for s in warmup.blocked_s]
        print(f"warm-up saves blocked {figures['first_saves_blocked_ms']} ms", flush=True)

        phases: list[Phase] = []
        for r in range(args.rounds):
            for checkpointing in (False, True) if r % 2 == 0 else (True, False):
                phase = run_phase(trainer, args.phase_s, args.interval, checkpointing)
                phases.append(phase)
                blocked = [round(b * 1000, 1) for b in phase.blocked_s]
                print(
                    f"round {r + 1} {'checkpointing' if checkpointing else 'baseline'}:"
                    f" {len(phase.step_s)} steps, mean {1000 * mean(phase.step_s):.2f} ms,"
                    f" cores: own {phase.own_cores:.2f}, others {phase.others_cores:.2f}"
                    + (f"; saves blocked {blocked} ms" if checkpointing else ""),
                    flush=True,
                )
        summarize(figures, phases)
        del state, trainer
        sdk.wait_for_checkpoints()
        figures.update(restorable_after_kill(args.state_mb, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    figures["load_average"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(figures), flush=True)


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def summarize(figures: dict[str, Any], phases: list[Phase]) -> None:
    base = [s for p in phases if not p.checkpointing for s in p.step_s]
    ckpt = [s for p in phases if p.checkpointing for s in p.step_s]
    blocked = [b * 1000 for p in phases for b in p.blocked_s]
    saves = [s for p in phases for s in p.saves]
    statuses = [s.status for s in saves]
    figures["save_blocked_ms_p50"] = rounded(percentile(blocked, 50), 1)
    figures["save_blocked_ms_p95"] = rounded(percentile(blocked, 95), 1)
    figures["save_blocked_ms_max"] = rounded(max(blocked), 1)
    figures["target_save_blocked_ms_p50"] = rounded(
        TARGET_BLOCKED_RATIO * figures["state_copy_ms"], 1
    )
    figures["step_ms_baseline"] = rounded(1000 * mean(base), 2)
    figures["step_ms_checkpointing"] = rounded(1000 * mean(ckpt), 2)
    figures["training_overhead"] = rounded(mean(ckpt) / mean(base) - 1, 4)
    figures["target_training_overhead"] = TARGET_OVERHEAD
    # The part of the overhead that cannot be noise: time the training thread spent inside
    # save_checkpoint over the checkpointing phases' time (steps and saves).
    figures["save_blocked_share"] = rounded(sum(blocked) / 1000 / sum(ckpt), 4)
    figures["saves"] = len(saves)
    figures["checkpoints_committed"] = statuses.count("committed")
    figures["target_checkpoints_committed"] = TARGET_COMMITTED
    figures["replaced"] = statuses.count("replaced")
    figures["failed"] = statuses.count("failed")
    figures["background_save_s_p50"] = rounded(median([s for p in phases for s in p.save_s]), 2)
    figures["steps_baseline"], figures["steps_checkpointing"] = len(base), len(ckpt)
    pairs = [phases[i : i + 2] for i in range(0, len(phases), 2)]
    figures["training_overhead_by_round"] = [
        rounded(
            mean(next(p for p in pair if p.checkpointing).step_s)
            / mean(next(p for p in pair if not p.checkpointing).step_s)
            - 1,
            4,
        )
        for pair in pairs
    ]
    figures["own_cores_checkpointing"] = rounded(
        mean([p.own_cores for p in phases if p.checkpointing]), 2
    )
    figures["own_cores_baseline"] = rounded(
        mean([p.own_cores for p in phases if not p.checkpointing]), 2
    )
    figures["others_cores_max"] = rounded(max(p.others_cores for p in phases), 2)


if __name__ == "__main__":
    main()
