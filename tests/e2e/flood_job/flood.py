"""A log flood (`tests/e2e/flood.py`): N metric lines as fast as they can be printed, then how
long that took.

    python flood.py --lines N [--block-writes] [--report FILE] [--start-file NAME]

Learner L (`LEARNER_ID`) prints `line(L, i)` for i = 0 .. N-1, e.g.
`step 12 loss 0.095167 acc 0.904833` (values that differ per line and per learner, so a line
out of place is seen), then `done in S s`, S measured by the program from before its first
line to after its last. `print` writes through as the environment says: under dlaas
(`PYTHONUNBUFFERED=1`) each line is its own write. With `--block-writes` lines go out in
64 KiB writes instead, the most lines a second a Python program can hand the pipe. With
`--report FILE` the time is also written to FILE (for a run whose output is thrown away).
With `--start-file NAME` it prints nothing until a file NAME exists in its directory (a
test starts the flood at the moment it chooses); with `--pause-after K --resume-file NAME`
it stops after its first K lines until a file NAME exists (a test lets the rest go when it
chooses).
Standard library only: this file is imported by the test and the benchmark for `line`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

DONE = "done in "


def values(learner: int, i: int) -> tuple[float, float]:
    loss = (i * 7919 + learner * 104729) % 1_000_003 / 1_000_003
    return loss, 1.0 - loss


def line(learner: int, i: int) -> str:
    loss, acc = values(learner, i)
    return f"step {i} loss {loss:.6f} acc {acc:.6f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, required=True)
    parser.add_argument("--block-writes", action="store_true")
    parser.add_argument("--report", default=None)
    parser.add_argument("--start-file", default=None)
    parser.add_argument("--pause-after", type=int, default=None)
    parser.add_argument("--resume-file", default=None)
    args = parser.parse_args()
    learner = int(os.environ.get("LEARNER_ID", "1"))
    out = sys.stdout
    if args.block_writes:
        out = open(sys.stdout.fileno(), "w", buffering=1 << 16, closefd=False)  # noqa: SIM115
    while args.start_file and not os.path.exists(args.start_file):
        time.sleep(0.005)
    began = time.perf_counter()
    for i in range(args.lines):
        if i == args.pause_after:
            out.flush()
            while not os.path.exists(args.resume_file):
                time.sleep(0.005)
        print(line(learner, i), file=out)
    out.flush()
    seconds = time.perf_counter() - began
    print(f"{DONE}{seconds:.6f} s", file=out, flush=True)
    if args.report:
        with open(args.report, "w") as report:
            report.write(f"{seconds:.6f}\n")


if __name__ == "__main__":
    main()
