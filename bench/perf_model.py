"""The performance model against real CPU learners: predicted and measured step times.

Three multilayer perceptrons (about 0.2, 1.9 and 10.5 million parameters) train on random
data with PyTorch on the CPU, one thread per learner, each learner a process of its own
(as the local backend runs learners), the gradients all-reduced over gloo as one flat
tensor after the backward pass (no overlap, as the model assumes).

Calibration, in the same run, as a job would calibrate on its own image:
- compute: one learner's step at per-learner batches of 64 and 256; a line through the two
  gives `sample_s` and `step_overhead_s` of `storage.performance_model`;
- exchange: two processes average 1 and 32 MiB of gradients as training does (copied into
  one flat tensor, all-reduced, copied back); a line through the two gives the exchange's
  bandwidth and latency (for two learners the ring sends the model once each way:
  model_bytes / bandwidth + 2 latency).

Measured: each model with 1 learner (global batch 128, in the same process as its
calibration, the three batches taking turns in 5 rounds) and 2 learners (global batch 256,
128 each), the median of about a second of steps after a warm-up (`--steps` scales them).
Figures: each case's predicted and measured milliseconds, and `mape` (mean absolute
percentage error over the cases, as a fraction; target 0.10). The parameter-server exchange
is not measured here.

Run from the repository root: `python -m bench.perf_model` (a few minutes). The last line is
the FINAL line, one JSON object `{"bench": "perf_model", ...}`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import socket
import statistics
import time
from collections.abc import Callable
from multiprocessing import get_context
from multiprocessing.queues import Queue
from typing import Any

from bench._latency_stats import rounded
from storage.performance_model import Exchange, ModelCosts, Network, step_s

# layer widths, and steps timed per case: about a second of them, so that a step of 2 ms
# is timed as steadily as one of 200
MODELS = {
    "small": ((784, 256, 10), 400),
    "medium": ((784, 1024, 1024, 10), 60),
    "large": ((784, 2048, 2048, 2048, 10), 20),
}
PER_LEARNER_BATCH = 128
CALIBRATION_BATCHES = (64, 256)
EXCHANGE_SIZES = ((1 << 20, 300), (32 << 20, 20))  # bytes, steps timed
ROUNDS = 5
TARGET_MAPE = 0.10


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _learner(rank: int, world: int, port: int, task: dict[str, Any], results: Queue[Any]) -> None:
    """One learner process: the median seconds of a step (or of averaging gradients) for
    each of the task's sizes, timed in `ROUNDS` interleaved rounds (so that the machine's
    drift over the run falls on every size alike), onto `results`."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    if world > 1:
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
        )
    try:
        if task["kind"] == "allreduce":
            # gradients as a model holds them: a few tensors, averaged as training does
            steps = {size: _exchange_step(torch, dist, size, world) for size in task["sizes"]}
        else:
            steps = _train_steps(torch, dist, world, task)
        times: dict[int, list[float]] = {size: [] for size in steps}
        per_round = max(task["steps"] // ROUNDS, 1)
        for step in steps.values():  # warm-up
            for _ in range(3):
                step()
        for _ in range(ROUNDS):
            for size, step in steps.items():
                for _ in range(per_round):
                    if world > 1:
                        dist.barrier()
                    started = time.perf_counter()
                    step()
                    times[size].append(time.perf_counter() - started)
        results.put((rank, {size: statistics.median(t) for size, t in times.items()}))
    finally:
        if world > 1:
            dist.destroy_process_group()


def _exchange_step(torch: Any, dist: Any, size: int, world: int) -> Callable[[], None]:
    grads = [torch.ones(size // 16) for _ in range(4)]
    return lambda: _average(torch, dist, grads, world)


def _train_steps(
    torch: Any, dist: Any, world: int, task: dict[str, Any]
) -> dict[int, Callable[[], None]]:
    """A training step of the task's model for each of its per-learner batch sizes."""
    torch.manual_seed(task["seed"])
    widths = task["widths"]
    layers: list[Any] = []
    for a, b in itertools.pairwise(widths):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    params = list(model.parameters())
    loss_fn = torch.nn.CrossEntropyLoss()

    def step_of(batch: int) -> Callable[[], None]:
        inputs = torch.randn(batch, widths[0])
        labels = torch.randint(0, widths[-1], (batch,))

        def step() -> None:
            optimizer.zero_grad()
            loss_fn(model(inputs), labels).backward()
            if world > 1:
                _average(torch, dist, [p.grad for p in params], world)
            optimizer.step()

        return step

    return {batch: step_of(batch) for batch in task["sizes"]}


def _average(torch: Any, dist: Any, grads: list[Any], world: int) -> None:
    """All-reduce the gradients as one flat tensor and average them in place."""
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset : offset + n].view_as(g))
        offset += n


def run(world: int, task: dict[str, Any]) -> dict[int, float]:
    """The task on `world` learner processes at once: per size, the slowest learner's median."""
    context = get_context("spawn")
    results: Queue[Any] = context.Queue()
    port = _free_port()
    processes = [
        context.Process(target=_learner, args=(rank, world, port, task, results))
        for rank in range(world)
    ]
    for process in processes:
        process.start()
    found = [results.get(timeout=600)[1] for _ in processes]
    for process in processes:
        process.join(timeout=60)
    return {size: max(medians[size] for medians in found) for size in found[0]}


def parameters(widths: tuple[int, ...]) -> int:
    return sum(a * b + b for a, b in itertools.pairwise(widths))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=float, default=1.0, help="steps timed, as a multiple")
    args = parser.parse_args()
    seed = 7
    (low, low_steps), (high, high_steps) = EXCHANGE_SIZES
    exchange = run(
        2,
        {
            "kind": "allreduce",
            "sizes": [low, high],
            "steps": round(max(low_steps, high_steps) * args.steps),
        },
    )
    t_low, t_high = exchange[low], exchange[high]
    bandwidth = (high - low) / max(t_high - t_low, 1e-9)
    latency = max((t_low - low / bandwidth) / 2, 0.0)
    network = Network(bandwidth_bytes_s=bandwidth, latency_s=latency)
    print(
        f"[perf_model] all-reduce: {t_low * 1e3:.2f} ms for 1 MiB, {t_high * 1e3:.2f} ms for "
        f"32 MiB: {bandwidth / 1e9:.2f} GB/s, latency {latency * 1e6:.0f} us",
        flush=True,
    )
    cases: list[dict[str, Any]] = []
    for name, (widths, steps) in MODELS.items():
        train = {
            "kind": "train",
            "widths": widths,
            "steps": round(steps * args.steps),
            "seed": seed,
        }
        small, large = CALIBRATION_BATCHES
        # one learner: the calibration's two batches and the measured one, interleaved
        alone = run(1, {**train, "sizes": [small, large, PER_LEARNER_BATCH]})
        sample_s = (alone[large] - alone[small]) / (large - small)
        costs = ModelCosts(
            sample_s=sample_s,
            step_overhead_s=max(alone[small] - sample_s * small, 0.0),
            model_bytes=parameters(widths) * 4,
        )
        for learners in (1, 2):
            if learners == 1:
                measured = alone[PER_LEARNER_BATCH]
            else:
                measured = run(learners, {**train, "sizes": [PER_LEARNER_BATCH]})[PER_LEARNER_BATCH]
            global_batch = learners * PER_LEARNER_BATCH
            predicted = step_s(costs, network, learners, global_batch, Exchange.ALL_REDUCE)
            case = {
                "model": name,
                "parameters": parameters(widths),
                "learners": learners,
                "global_batch": global_batch,
                "predicted_ms": rounded(predicted * 1e3, 2),
                "measured_ms": rounded(measured * 1e3, 2),
                "error": rounded(abs(predicted - measured) / measured, 3),
            }
            cases.append(case)
            print(
                f"[perf_model] {name} ({case['parameters']:,} parameters), {learners} "
                f"learner(s): predicted {case['predicted_ms']} ms, measured "
                f"{case['measured_ms']} ms, error {case['error']}",
                flush=True,
            )
    mape = statistics.fmean(
        abs(c["predicted_ms"] - c["measured_ms"]) / c["measured_ms"] for c in cases
    )
    print(
        json.dumps(
            {
                "bench": "perf_model",
                "mape": rounded(mape, 3),
                "target_mape": TARGET_MAPE,
                "mape_two_learners": rounded(
                    statistics.fmean(c["error"] for c in cases if c["learners"] == 2), 3
                ),
                "bandwidth_gb_s": rounded(bandwidth / 1e9, 3),
                "latency_us": rounded(latency * 1e6, 1),
                "cases": cases,
                "exchange": "allreduce",
                "machine_cores": os.cpu_count(),
                "load_average_before": rounded(os.getloadavg()[0], 2),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
