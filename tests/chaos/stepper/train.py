"""A light training program for the chaos tests: numbered steps checkpointed by the dlaas SDK.

Its state after step n is a hash chain over steps 1..n, so the final digest is the same
whatever was killed and resumed on the way, and differs if a step was skipped or lost
between a checkpoint and a restart. Each step sleeps `--step-delay`; a checkpoint (every
DLAAS_CHECKPOINT_INTERVAL seconds and at the end) holds the state and `--checkpoint-mb` MiB
standing in for a model's weights, so writing one takes a moment.

    python train.py --steps 200 --step-delay 0.02 [--checkpoint-mb 16] [--term-grace 5]
                    [--checkpoint-on-term] [--result-mb 64]

SIGTERM ends it at once, unless `--term-grace S`: then it keeps stepping for S seconds
(a program finishing its step and saving what it has, slowly) and exits 143, with
`--checkpoint-on-term` after a checkpoint of the step it stopped at.

Prints `stepper: resumed from ckpt-... at step S`, then `step N digest D` per step, and at
the end writes RESULT_DIR/result.json {"steps": N, "digest": D} (and, with `--result-mb`,
RESULT_DIR/blob.bin of that many MiB, a result that takes a moment to store).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import signal
import sys
import time

from learner_image import sdk

STATE_FILE = "state.json"
WEIGHTS_FILE = "weights.bin"


def advance(digest: str, step: int) -> str:
    return hashlib.sha256(f"{digest}:{step}".encode()).hexdigest()


def final_digest(steps: int) -> str:
    """The digest an uninterrupted run of `steps` steps ends with."""
    digest = ""
    for step in range(1, steps + 1):
        digest = advance(digest, step)
    return digest


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--step-delay", type=float, default=0.02)
    parser.add_argument("--checkpoint-mb", type=int, default=0)
    parser.add_argument("--term-grace", type=float, default=0.0)
    parser.add_argument("--result-mb", type=int, default=0)
    parser.add_argument("--checkpoint-on-term", action="store_true")
    args = parser.parse_args()
    terminated_at: list[float] = []
    if args.term_grace > 0:
        signal.signal(signal.SIGTERM, lambda *_: terminated_at.append(time.monotonic()))
    env = sdk.env()
    step, digest = 0, ""
    restored = sdk.load_checkpoint()
    if restored is not None:
        saved = json.loads(restored.read(STATE_FILE))
        step, digest = int(saved["step"]), str(saved["digest"])
        print(f"stepper: resumed from {restored.path.name} at step {step}", flush=True)
    weights = bytes(args.checkpoint_mb << 20)

    def checkpoint() -> sdk.PendingCheckpoint | None:
        state = json.dumps({"step": step, "digest": digest}).encode()
        return sdk.save_checkpoint_files({STATE_FILE: state, WEIGHTS_FILE: weights}, step)

    timer = sdk.CheckpointTimer()
    while step < args.steps:
        if terminated_at and time.monotonic() - terminated_at[0] > args.term_grace:
            if args.checkpoint_on_term:
                sdk.save_checkpoint_files(
                    {STATE_FILE: json.dumps({"step": step, "digest": digest}).encode()},
                    step,
                    blocking=True,
                )
            print(f"stepper: stopping at step {step} on SIGTERM", flush=True)
            sys.exit(143)
        time.sleep(args.step_delay)
        step += 1
        digest = advance(digest, step)
        print(f"step {step} digest {digest[:12]}", flush=True)
        if timer.due():
            timer.reset(checkpoint())
    checkpoint()
    env.result_dir.mkdir(parents=True, exist_ok=True)
    if args.result_mb:
        (env.result_dir / "blob.bin").write_bytes(bytes(args.result_mb << 20))
    (env.result_dir / "result.json").write_text(json.dumps({"steps": step, "digest": digest}))
    print(f"stepper: done at step {step}", flush=True)


if __name__ == "__main__":
    main()
