"""The burst's job (`tests/e2e/burst.py`): a moment of work, then the exit its plan asks for.

    python train.py [--work-s 0.5] [--fail-learner N --exit-code C [--fail-attempts A]]
                    [--hold-s S]

Learner N (`LEARNER_ID`) exits C, in every attempt or, with `--fail-attempts A`, in attempts
1 to A only (`DLAAS_ATTEMPT`); every other learner exits 0. With `--hold-s S` the first
attempt waits S seconds before its work, so a halt or a delete finds it running. Plain
Python, standard library only: the job costs the platform, not itself.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work-s", type=float, default=0.5)
    parser.add_argument("--fail-learner", type=int, default=0)
    parser.add_argument("--exit-code", type=int, default=1)
    parser.add_argument("--fail-attempts", type=int, default=None)
    parser.add_argument("--hold-s", type=float, default=0.0)
    args = parser.parse_args()
    learner = int(os.environ.get("LEARNER_ID", "1"))
    attempt = int(os.environ.get("DLAAS_ATTEMPT", "1"))
    print(f"burst: learner {learner}, attempt {attempt}", flush=True)
    if args.hold_s and attempt == 1:
        time.sleep(args.hold_s)
    time.sleep(args.work_s)
    failing_attempt = args.fail_attempts is None or attempt <= args.fail_attempts
    if learner == args.fail_learner and failing_attempt:
        print(f"burst: learner {learner} fails with exit code {args.exit_code}", flush=True)
        sys.exit(args.exit_code)
    print(f"burst: learner {learner} done", flush=True)


if __name__ == "__main__":
    main()
