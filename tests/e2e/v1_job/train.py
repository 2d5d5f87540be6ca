"""The /v1 end-to-end test's job (`tests/e2e/test_v1_models.py`): a few steps that report
a loss, then a trained model in RESULT_DIR. Standard library only."""

from __future__ import annotations

import os
from pathlib import Path


def main() -> None:
    for step in range(1, 4):
        print(f"step {step} loss {1.0 / step:.4f}", flush=True)
    Path(os.environ["RESULT_DIR"], "model.txt").write_text("trained by a /v1 submission\n")
    print("done", flush=True)


if __name__ == "__main__":
    main()
