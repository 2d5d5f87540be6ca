"""The learner processes `bench/perf_model.py` starts, and what each one times.

A task names its steps (`StepSpec`: a model's training step at a per-learner batch, or the
exchange of a gradient already computed; each with its exchange: none, gloo or dlaas-ps) and
how many of each to time. Every learner times the same steps in the same order, in `ROUNDS`
interleaved rounds, every other one backwards (so the machine's drift over the run falls on
every step alike), and puts each step's list of seconds on the result queue; the caller
takes, step by step, the slowest learner's time (the one the others wait for) and quotes
the median.

Learners of more than one are in one torch.distributed group, and a `barrier` before each
timed step lines them up, so the k-th step of every learner is the same step.

- local: the learner's own optimizer step, nothing exchanged (compute alone);
- gloo: gradients all-reduced as one flat tensor after the backward pass (no overlap, as the
  model assumes), then the learner's optimizer step;
- ps: the learners attached to a dlaas-ps sidecar in sync mode (every update the sum of
  every learner's gradient, as an all-reduce averages them), in the region
  `<task.region>/<spec.region>`; `TorchParameterServer.step()` replaces the optimizer's;
- ps-compute: attached so, the gradient computed into the slot and not pushed (the compute
  of a learner whose weights and gradients live in the sidecar's shared memory).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

ROUNDS = 10
WARM_UP = 3
# Before each timed exchange of a gradient already computed, the learner computes (untimed)
# for as long as a small model's step does: a sidecar or a peer that has waited idle through
# a step's compute takes longer to answer (a virtual CPU wakes from halt, caches are cold)
# than one answering back-to-back exchanges, and training's exchanges are the former.
COMPUTE_BEFORE_EXCHANGE_S = 0.003


@dataclass(frozen=True)
class StepSpec:
    """One kind of step: a training step (`widths`, `batch`; with the exchange or not), or
    an exchange alone of `exchange_bytes` of gradients."""

    name: str
    via: str  # "local", "gloo", "ps" or "ps-compute"
    steps: int
    widths: tuple[int, ...] = ()
    batch: int = 0
    exchange_bytes: int = 0
    region: str = ""  # ps: the sidecar's region, under the task's; default: the name

    @property
    def region_name(self) -> str:
        return self.region or self.name


@dataclass(frozen=True)
class Task:
    world: int
    specs: tuple[StepSpec, ...]
    port: int = 0  # gloo's rendezvous
    region: str = ""  # the directory of the sidecars' regions, one per ps step kind
    seed: int = 7


def learner(rank: int, task: Task, results: Queue[Any]) -> None:
    """One learner process: (rank, {spec name: [seconds of each timed step]}) onto
    `results`; for training steps also `<name>/update`, the optimizer's share."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    torch.manual_seed(task.seed)
    gloo = task.world > 1
    if gloo:
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{task.port}", rank=rank, world_size=task.world
        )
    try:
        servers: dict[str, Any] = {}
        steps = {spec.name: _step(torch, dist, task, rank, spec, servers) for spec in task.specs}
        times: dict[str, list[float]] = {}
        for step in steps.values():
            for _ in range(WARM_UP):
                step()
                _compute(torch, COMPUTE_BEFORE_EXCHANGE_S)
        for round_ in range(ROUNDS):
            # every other round backwards, so that a drift within a round evens out
            for spec in task.specs[:: -1 if round_ % 2 else 1]:
                step = steps[spec.name]
                for _ in range(max(spec.steps // ROUNDS, 1)):
                    if gloo:
                        dist.barrier()
                    if spec.exchange_bytes:
                        _compute(torch, COMPUTE_BEFORE_EXCHANGE_S)
                    began = time.perf_counter()
                    update = step()
                    times.setdefault(spec.name, []).append(time.perf_counter() - began)
                    if update is not None:
                        times.setdefault(f"{spec.name}/update", []).append(update)
        results.put((rank, times))
    finally:
        if gloo:
            dist.destroy_process_group()


def _step(
    torch: Any, dist: Any, task: Task, rank: int, spec: StepSpec, servers: dict[str, Any]
) -> Callable[[], float | None]:
    if not spec.widths:
        return _exchange_only(torch, dist, task, rank, spec)
    if spec.via.startswith("ps") and spec.region_name in servers:
        model, server = servers[spec.region_name]  # one attach per region and learner
    else:
        layers: list[Any] = []
        for a, b in itertools.pairwise(spec.widths):
            layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
        model = torch.nn.Sequential(*layers[:-1])
    inputs = torch.randn(spec.batch, spec.widths[0])
    labels = torch.randint(0, spec.widths[-1], (spec.batch,))
    loss_fn = torch.nn.CrossEntropyLoss()
    if spec.via.startswith("ps"):
        from learner_image import ps

        if spec.region_name not in servers:
            region = Path(task.region) / spec.region_name
            server = ps.attach(model, ps.SGD(lr=0.01), directory=region, slot=rank, timeout=60)
            servers[spec.region_name] = (model, server)
        push = spec.via == "ps"

        def ps_step() -> None:
            server.zero_grad()
            loss_fn(model(inputs), labels).backward()
            if push:
                server.step()

        return ps_step
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    params = list(model.parameters())
    exchange = spec.via == "gloo" and task.world > 1

    def step() -> float:
        optimizer.zero_grad()
        loss_fn(model(inputs), labels).backward()
        if exchange:
            _average(torch, dist, [p.grad for p in params], task.world)
        began = time.perf_counter()
        optimizer.step()
        return time.perf_counter() - began

    return step


def _exchange_only(
    torch: Any, dist: Any, task: Task, rank: int, spec: StepSpec
) -> Callable[[], float | None]:
    """A gradient already computed, exchanged as training exchanges it."""
    numel = spec.exchange_bytes // 4
    if spec.via == "ps":
        import numpy as np

        from learner_image.ps.client import ParameterServer
        from learner_image.ps.layout import SGD, ModelLayout

        layout = ModelLayout.of([("w", (numel,))])
        client = ParameterServer(Path(task.region) / spec.name, rank, timeout=60)
        client.attach(layout, SGD(lr=1e-6), np.zeros(numel, np.float32))
        client.gradient[:] = 1.0

        def push() -> None:
            client.push()

        return push
    # a few tensors, as a model holds its gradients
    grads = [torch.ones(numel // 4) for _ in range(4)]

    def average() -> None:
        _average(torch, dist, grads, task.world)

    return average


def _compute(torch: Any, seconds: float) -> None:
    """Multiply matrices for `seconds`."""
    a = torch.ones(128, 128)
    ended = time.perf_counter() + seconds
    while time.perf_counter() < ended:
        a = torch.mm(a, a) * 1e-3


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
