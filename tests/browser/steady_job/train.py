"""The browser tests' job: a step every `--step-s` seconds, each printed as a log line and
reported as a metric line, until `--steps`; standard library only.

    python train.py [--steps 40] [--step-s 0.1] [--scale 1.0] [--fail-at N]

`--scale` sets the loss curve's height, so two jobs' curves differ when compared; with
`--fail-at N` the first attempt exits 3 at step N, so the job restarts once.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--step-s", type=float, default=0.1)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--fail-at", type=int, default=0)
    args = parser.parse_args()
    learner = os.environ.get("LEARNER_ID", "1")
    attempt = os.environ.get("DLAAS_ATTEMPT", "1")
    print(f"steady: learner {learner}, attempt {attempt}", flush=True)
    for step in range(1, args.steps + 1):
        loss = args.scale / step
        print(f"step {step} loss {loss:.4f}", flush=True)
        print(json.dumps({"dlaas_metric": True, "step": step, "loss": loss}), flush=True)
        if step == args.fail_at and attempt == "1":
            print(f"steady: failing at step {step}", flush=True)
            sys.exit(3)
        time.sleep(args.step_s)
    print("steady: done", flush=True)


if __name__ == "__main__":
    main()
