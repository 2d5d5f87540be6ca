"""Cascade SVM: a support-vector classifier on the 8x8 digits, fitted across dlaas learners.

Each learner fits an SVC on its shard of the training set and keeps only the samples that
became support vectors: a sample off the margin of its shard's model is very unlikely to be
a support vector of the model of all the data, so it is eliminated. The survivors are merged
pairwise, level by level (Graf et al.'s cascade SVM: 4 learners take 2 rounds of merging, 2
learners 1), each merge refitted and filtered the same way, until one set is left; the chief
fits the final model on it. For comparison the chief also fits one SVC on the whole training
set, as a single process would, and reports both accuracies on the held-out samples.

Learners exchange only the indices of their survivors (every learner reads the same data
file), with torch.distributed over gloo, which dlaas sets up for every job (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT). Run as a plain script (`DATA_DIR=../../digits/data python
train.py`) it is one learner: one shard, no merge.

After each round the chief checkpoints every survivor set through the SDK; a restarted job
resumes after the last round committed. SIGTERM is honoured between rounds: the learners
checkpoint the round reached and exit with 143.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from learner_image import sdk

HELD_OUT = 300


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--C", type=float, default=10.0, help="the SVC's penalty")
    p.add_argument("--gamma", default="scale", help="the RBF kernel's gamma (or 'scale')")
    p.add_argument("--seed", type=int, default=0, help="fixes how samples are dealt to shards")
    p.add_argument("--data", type=Path, default=None, help="default: $DATA_DIR/digits.npz")
    p.add_argument(
        "--round-delay",
        type=float,
        default=0.0,
        help="sleep this many seconds after each round (to watch checkpoints in a demo)",
    )
    return p.parse_args(argv)


def load_data(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    with np.load(path) as npz:
        x = npz["images"].reshape(len(npz["images"]), -1).astype(np.float64) / 16.0
        y = npz["labels"].astype(np.int64)
    return x[:-HELD_OUT], y[:-HELD_OUT], x[-HELD_OUT:], y[-HELD_OUT:]


def make_svc(args: argparse.Namespace) -> Any:
    from sklearn.svm import SVC

    gamma: float | str = args.gamma if args.gamma in ("scale", "auto") else float(args.gamma)
    return SVC(C=args.C, gamma=gamma, kernel="rbf")


def shards(n: int, world_size: int, seed: int) -> list[np.ndarray]:
    """Every sample in exactly one shard, dealt in a seeded order: the same on every learner."""
    order = np.random.default_rng(seed).permutation(n)
    return [np.sort(order[rank::world_size]) for rank in range(world_size)]


def survivors(
    args: argparse.Namespace, x: np.ndarray, y: np.ndarray, indices: np.ndarray
) -> np.ndarray:
    """The samples of `indices` that are support vectors of an SVC fitted on them alone."""
    if len(np.unique(y[indices])) < 2:  # nothing to separate: keep them all for the merge
        return indices
    model = make_svc(args).fit(x[indices], y[indices])
    return np.sort(indices[model.support_])


def merge_plan(n_sets: int) -> list[tuple[int, ...]]:
    """One cascade level: sets 2i and 2i+1 are merged (by learner i); an odd last set waits."""
    return [tuple(range(i, min(i + 2, n_sets))) for i in range(0, n_sets, 2)]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    e = sdk.env()
    print(f"svm: rank {e.rank} of {e.world_size} starting", flush=True)
    stop = sdk.watch_for_stop()
    started = time.monotonic()

    if e.is_distributed:
        import torch.distributed as dist

        dist.init_process_group("gloo", rank=e.rank, world_size=e.world_size)

    def gather(value: Any) -> list[Any]:
        if not e.is_distributed:
            return [value]
        gathered: list[Any] = [None] * e.world_size
        dist.all_gather_object(gathered, value)
        return gathered

    x_train, y_train, x_test, y_test = load_data(args.data or e.data_dir / "digits.npz")
    config = {"C": args.C, "gamma": args.gamma, "seed": args.seed, "world_size": e.world_size}

    # The chief's checkpoint, if any, decides where every learner starts.
    ckpt = sdk.load_checkpoint() if e.is_chief else None
    saved = ckpt.state if ckpt is not None else None
    if saved is not None and saved.get("config") != config:
        print("svm: checkpoint was taken with other settings; starting over", flush=True)
        saved = None
    start_round, sets = gather((saved["round"], saved["sets"]) if saved is not None else (0, None))[
        0
    ]
    if sets is not None:
        print(f"svm: resumed after round {start_round} ({len(sets)} survivor sets)", flush=True)

    def end_of_round(round_: int, sets: list[np.ndarray]) -> None:
        kept = sum(len(s) for s in sets)
        if e.is_chief:
            print(f"round {round_} sets {len(sets)} survivors {kept}", flush=True)
            sdk.log_metrics(round_, survivors=kept, sets=len(sets))
            state = {"round": round_, "sets": sets, "config": config}
            committed = sdk.save_checkpoint(state, round_, blocking=True)
            if committed is not None:
                print(f"svm: checkpoint {committed.name} committed", flush=True)
        if args.round_delay > 0:
            time.sleep(args.round_delay)
        if any(gather(stop.requested)):
            print(f"svm: stopping after round {round_} on SIGTERM", flush=True)
            stop.exit()

    round_ = start_round
    if sets is None:
        # Round 1: each learner eliminates, on its own shard, what cannot be a support vector.
        mine = shards(len(x_train), e.world_size, args.seed)[e.rank]
        sets = gather(survivors(args, x_train, y_train, mine))
        round_ = 1
        end_of_round(round_, sets)
    while len(sets) > 1:
        # A cascade level: learner i merges sets 2i and 2i+1 and filters the union again.
        plan = merge_plan(len(sets))
        merged: np.ndarray | None = None
        if e.rank < len(plan):
            union = np.sort(np.concatenate([sets[j] for j in plan[e.rank]]))
            merged = survivors(args, x_train, y_train, union) if len(plan[e.rank]) > 1 else union
        sets = [s for s in gather(merged) if s is not None]
        round_ += 1
        end_of_round(round_, sets)

    if e.is_chief:
        finish(args, e, sets[0], x_train, y_train, x_test, y_test, round_, started)
    if e.is_distributed:
        dist.barrier()
        dist.destroy_process_group()
    return 0


def finish(
    args: argparse.Namespace,
    e: sdk.LearnerEnv,
    kept: np.ndarray,
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    rounds: int,
    started: float,
) -> None:
    """The final fit on the survivors, the single-process fit on everything, and the results."""
    import joblib

    t = time.monotonic()
    model = make_svc(args).fit(x_train[kept], y_train[kept])
    final_fit_s = time.monotonic() - t
    t = time.monotonic()
    single = make_svc(args).fit(x_train, y_train)
    single_fit_s = time.monotonic() - t

    predicted = model.predict(x_test)
    accuracy = float((predicted == y_test).mean())
    single_accuracy = float((single.predict(x_test) == y_test).mean())
    agreement = float((predicted == single.predict(x_test)).mean())
    print(
        f"final accuracy {accuracy:.4f} single-process accuracy {single_accuracy:.4f} "
        f"(fitted on {len(kept)} of {len(x_train)} samples; "
        f"{len(model.support_)} vs {len(single.support_)} support vectors)",
        flush=True,
    )
    sdk.log_metrics(rounds, test_accuracy=accuracy, single_process_accuracy=single_accuracy)

    e.result_dir.mkdir(parents=True, exist_ok=True)
    tmp = e.result_dir / ".model.joblib.tmp"
    joblib.dump(model, tmp)
    os.replace(tmp, e.result_dir / "model.joblib")
    metrics = {
        "test_accuracy": accuracy,
        "single_process_accuracy": single_accuracy,
        "agreement_with_single_process": agreement,
        "held_out_samples": HELD_OUT,
        "training_samples": len(x_train),
        "survivors": len(kept),
        "support_vectors": len(model.support_),
        "single_process_support_vectors": len(single.support_),
        "rounds": rounds,
        "world_size": e.world_size,
        "final_fit_seconds": round(final_fit_s, 3),
        "single_process_fit_seconds": round(single_fit_s, 3),
        "seconds": round(time.monotonic() - started, 3),
    }
    (e.result_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
