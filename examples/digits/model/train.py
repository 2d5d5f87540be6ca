"""Digits: a small CNN on 8x8 handwritten digits, data-parallel over dlaas learners.

Run by dlaas with one process per learner (RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set:
torch.distributed over gloo), or locally as a plain script (`DATA_DIR=../data python train.py`).

Deterministic: given `--seed`, a run that is killed and resumed from its last checkpoint ends
with exactly the weights of an uninterrupted run. A checkpoint holds the model, the optimizer,
the step (which fixes the epoch and the position in its shuffled order) and every learner's
RNG states. Checkpoints are taken every DLAAS_CHECKPOINT_INTERVAL seconds and at the end, and
written in the background while training goes on.

SIGTERM: the learners finish the current step, commit a checkpoint and exit with 143
(a second SIGTERM, or 20 s without reaching a step boundary, exits at once).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from learner_image import sdk

if TYPE_CHECKING:
    import torch

HELD_OUT = 300


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--max-steps", type=int, default=None, help="stop after this many steps")
    p.add_argument("--batch-size", type=int, default=32, help="per learner")
    p.add_argument("--lr", type=float, default=0.005, help="peak learning rate")
    p.add_argument(
        "--base-batch-size",
        type=int,
        default=64,
        help="the global batch --lr is tuned for; an elastic job scales the rate with its batch",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", type=Path, default=None, help="default: $DATA_DIR/digits.npz")
    p.add_argument(
        "--ps",
        action="store_true",
        help="exchange gradients through the pod's dlaas-ps sidecar instead of all-reduce",
    )
    p.add_argument(
        "--step-delay",
        type=float,
        default=0.0,
        help="sleep this many seconds per step (to watch checkpoints and restarts in a demo)",
    )
    return p.parse_args(argv)


def build_model() -> torch.nn.Module:
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Dropout(0.25),
        nn.Flatten(),
        nn.Linear(64 * 4 * 4, 128),
        nn.ReLU(),
        nn.Dropout(0.25),
        nn.Linear(128, 10),
    )


def load_data(path: Path) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    import numpy as np
    import torch

    with np.load(path) as npz:
        images = torch.from_numpy(npz["images"].astype(np.float32) / 16.0).unsqueeze(1)
        labels = torch.from_numpy(npz["labels"].astype(np.int64))
    return images[:-HELD_OUT], labels[:-HELD_OUT], images[-HELD_OUT:], labels[-HELD_OUT:]


def lr_at(step: int, total_steps: int, peak: float) -> float:
    """One-cycle schedule: linear warm-up over the first 20% of steps, then cosine decay."""
    warmup = max(1, int(0.2 * total_steps))
    if step < warmup:
        return peak * (0.04 + 0.96 * step / warmup)
    progress = (step - warmup) / max(1, total_steps - warmup)
    return peak * (0.0004 + 0.9996 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def shift_randomly(images: torch.Tensor) -> torch.Tensor:
    """Augment: move each image by up to one pixel in each direction (torch's global RNG)."""
    import torch
    import torch.nn.functional as F

    n, size = images.shape[0], images.shape[-1]
    padded = F.pad(images[:, 0], (1, 1, 1, 1))
    rows = torch.randint(0, 3, (n, 1)) + torch.arange(size)
    cols = torch.randint(0, 3, (n, 1)) + torch.arange(size)
    picked = padded[torch.arange(n)[:, None, None], rows[:, :, None], cols[:, None, :]]
    return picked.unsqueeze(1)


def epoch_order(seed: int, epoch: int, n: int) -> torch.Tensor:
    """The shuffled sample order of one epoch: the same on every learner and every attempt."""
    import torch

    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100_003 + epoch))


def rng_state() -> dict[str, Any]:
    import numpy as np
    import torch

    return {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    import numpy as np
    import torch

    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    e = sdk.env()
    print(f"digits: rank {e.rank} of {e.world_size} starting", flush=True)
    stop = sdk.watch_for_stop()

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    started = time.monotonic()
    if args.ps:
        return train_with_parameter_server(args, e, stop, started)
    if e.is_distributed:
        dist.init_process_group("gloo", rank=e.rank, world_size=e.world_size)

    x_train, y_train, x_test, y_test = load_data(args.data or e.data_dir / "digits.npz")
    n_train = len(x_train)
    # An elastic job's attempt runs at the global batch dlaas gives it; any other at
    # --batch-size per learner.
    global_batch = e.global_batch_size or args.batch_size * e.world_size
    steps_per_epoch = n_train // global_batch
    total_steps = args.epochs * steps_per_epoch
    if args.max_steps is not None:
        total_steps = min(total_steps, args.max_steps)

    def lr_now(step: int, epoch: int, offset: int) -> float:
        if e.global_batch_size is None:
            return lr_at(step, total_steps, args.lr)
        # elastic: the schedule follows the samples seen, as if every step took
        # --base-batch-size of them, and the rate scales with the batch (the SDK's rule)
        base = args.base_batch_size
        seen = (epoch * n_train + offset) // base
        return e.scaled_lr(lr_at(seen, args.epochs * n_train // base, args.lr), base)

    seed_everything(args.seed)
    model = build_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    seed_everything(args.seed + 1 + e.rank)  # each learner its own dropout stream
    step, epoch, offset = resume(model, optimizer, e, args, steps_per_epoch, global_batch)
    net: torch.nn.Module = DistributedDataParallel(model) if e.is_distributed else model

    def checkpoint(at_step: int) -> sdk.PendingCheckpoint | None:
        states: list[Any] = [rng_state()]
        if e.is_distributed:
            states = [None] * e.world_size
            dist.all_gather_object(states, rng_state())
        state = {
            "step": at_step,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "rng": states,
            "world_size": e.world_size,
            "seed": args.seed,
            "epoch": epoch,
            "offset": offset,
        }
        # Returns once the state is copied: it is written in the background as training goes on.
        return sdk.save_checkpoint(state, at_step)

    saving: sdk.PendingCheckpoint | None = None
    timer = sdk.CheckpointTimer()
    order = epoch_order(args.seed, epoch, n_train)
    while epoch < args.epochs and (args.max_steps is None or step < args.max_steps):
        if n_train - offset < global_batch:  # the epoch's tail, short of a batch, is left
            epoch, offset = epoch + 1, 0
            order = epoch_order(args.seed, epoch, n_train)
            continue
        batch = order[offset : offset + global_batch][e.rank :: e.world_size]
        for group in optimizer.param_groups:
            group["lr"] = lr_now(step, epoch, offset)
        offset += global_batch
        net.train()
        optimizer.zero_grad()
        logits = net(shift_randomly(x_train[batch]))
        loss = F.cross_entropy(logits, y_train[batch])
        loss.backward()
        optimizer.step()
        step += 1

        correct = (logits.argmax(1) == y_train[batch]).sum().item()
        wants_checkpoint = e.is_chief and timer.due()
        stats = torch.tensor(
            [loss.item() * len(batch), correct, len(batch), wants_checkpoint, stop.requested],
            dtype=torch.float64,
        )
        if e.is_distributed:
            dist.all_reduce(stats)
        train_loss, train_acc = (stats[0] / stats[2]).item(), (stats[1] / stats[2]).item()
        if e.is_chief:
            # The manifest's evaluation_metrics regex turns this line into metrics.
            print(f"step {step} loss {train_loss:.4f} accuracy {train_acc:.4f}", flush=True)
        if saving is not None and saving.done():
            announce(saving.wait())
            saving = None
        if stats[3] > 0 or stats[4] > 0:
            saving = checkpoint(step)
            timer.reset(saving)
        if stats[4] > 0:
            if saving is not None:
                announce(saving.wait())
            print(f"digits: stopping at step {step} on SIGTERM", flush=True)
            stop.exit()
        if args.step_delay > 0:
            time.sleep(args.step_delay)

    saving = checkpoint(step)
    model.eval()
    with torch.no_grad():
        test_logits = model(x_test)
        test_loss = F.cross_entropy(test_logits, y_test).item()
        test_acc = (test_logits.argmax(1) == y_test).float().mean().item()
    if saving is not None:
        announce(saving.wait())
    print(f"final accuracy {test_acc:.4f}", flush=True)
    if e.is_chief:
        sdk.log_metrics(step, test_loss=test_loss, test_accuracy=test_acc)
        write_results(e.result_dir, model, step, test_loss, test_acc, e.world_size, started)
    if e.is_distributed:
        dist.destroy_process_group()
    return 0


def train_with_parameter_server(
    args: argparse.Namespace, e: sdk.LearnerEnv, stop: sdk.StopRequest, started: float
) -> int:
    """The same model, data and schedule, with the weights and Adam's state in the pod's
    parameter server: each learner computes its gradient into its slot and `step()`
    replaces the optimizer step (the sidecar's mode, DLAAS_PS_MODE, decides how gradients
    combine). The sidecar snapshots its own state; learners checkpoint only at the end."""
    import torch
    import torch.nn.functional as F

    from learner_image import ps

    x_train, y_train, x_test, y_test = load_data(args.data or e.data_dir / "digits.npz")
    steps_per_epoch = len(x_train) // (args.batch_size * e.world_size)
    total_steps = args.epochs * steps_per_epoch
    if args.max_steps is not None:
        total_steps = min(total_steps, args.max_steps)
    seed_everything(args.seed)
    model = build_model()
    server = ps.attach(model, ps.Adam(lr=args.lr))
    seed_everything(args.seed + 1 + e.rank)
    global_batch = args.batch_size * e.world_size
    order = epoch_order(args.seed, 0, len(x_train))
    step = 0
    while step < total_steps:
        epoch, position = divmod(step, steps_per_epoch)
        if position == 0:
            order = epoch_order(args.seed, epoch, len(x_train))
        batch = order[position * global_batch : (position + 1) * global_batch][
            e.rank :: e.world_size
        ]
        model.train()
        server.zero_grad()
        logits = model(shift_randomly(x_train[batch]))
        loss = F.cross_entropy(logits, y_train[batch])
        loss.backward()
        server.step(lr=lr_at(step, total_steps, args.lr))
        step += 1
        if e.is_chief:
            accuracy = (logits.argmax(1) == y_train[batch]).float().mean().item()
            print(f"step {step} loss {loss.item():.4f} accuracy {accuracy:.4f}", flush=True)
        if stop.requested:
            print(f"digits: stopping at step {step} on SIGTERM", flush=True)
            return sdk.EXIT_STOPPED
        if args.step_delay > 0:
            time.sleep(args.step_delay)

    model.eval()
    with torch.no_grad():
        test_logits = model(x_test)
        test_loss = F.cross_entropy(test_logits, y_test).item()
        test_acc = (test_logits.argmax(1) == y_test).float().mean().item()
    print(f"final accuracy {test_acc:.4f} (parameter server version {server.version})", flush=True)
    if e.is_chief:
        announce(
            sdk.save_checkpoint({"step": step, "model": model.state_dict()}, step, blocking=True)
        )
        sdk.log_metrics(step, test_loss=test_loss, test_accuracy=test_acc)
        write_results(e.result_dir, model, step, test_loss, test_acc, e.world_size, started)
    server.close()
    return 0


def announce(committed: Path | None) -> None:
    if committed is not None:
        print(f"digits: checkpoint {committed.name} committed", flush=True)


def resume(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    e: sdk.LearnerEnv,
    args: Any,
    steps_per_epoch: int,
    global_batch: int,
) -> tuple[int, int, int]:
    """Restore the newest committed checkpoint, the same one on every learner: the step,
    epoch and offset in the epoch reached (a checkpoint without the last two was taken at
    this attempt's batch)."""
    import torch.distributed as dist

    ckpt = sdk.load_checkpoint() if e.is_chief else None
    if e.is_distributed:
        chosen = [ckpt.step if ckpt is not None else -1]
        dist.broadcast_object_list(chosen, src=0)
        if not e.is_chief and chosen[0] >= 0:
            ckpt = sdk.load_checkpoint(step=chosen[0])
            if ckpt is None:
                raise RuntimeError(
                    f"checkpoint for step {chosen[0]} not found in {e.checkpoint_dir}"
                )
    if ckpt is None or ckpt.state is None:
        return 0, 0, 0
    state = ckpt.state
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if state.get("world_size") == e.world_size and state.get("seed") == args.seed:
        set_rng_state(state["rng"][e.rank])
    else:
        print("digits: world size or seed changed; RNG streams restarted", flush=True)
        seed_everything(args.seed + 1 + e.rank + 7919 * state["step"])
    step = int(state["step"])
    if "epoch" in state:
        epoch, offset = int(state["epoch"]), int(state["offset"])
    else:
        epoch, position = divmod(step, steps_per_epoch)
        offset = position * global_batch
    print(f"digits: resumed from {ckpt.path.name} at step {step}", flush=True)
    return step, epoch, offset


def write_results(
    result_dir: Path,
    model: torch.nn.Module,
    step: int,
    test_loss: float,
    test_acc: float,
    world_size: int,
    started: float,
) -> None:
    import torch

    result_dir.mkdir(parents=True, exist_ok=True)
    tmp = result_dir / ".model.pt.tmp"
    torch.save(model.state_dict(), tmp)
    os.replace(tmp, result_dir / "model.pt")
    metrics = {
        "steps": step,
        "test_loss": test_loss,
        "test_accuracy": test_acc,
        "held_out_samples": HELD_OUT,
        "world_size": world_size,
        "seconds": round(time.monotonic() - started, 3),
    }
    (result_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
