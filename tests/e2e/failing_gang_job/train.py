"""A gang of two that one learner fails: learner 1 trains until it is stopped and then
takes a few seconds to write its last words; learner 2 fails as soon as learner 1
answers on the gang's port (so learner 1 is ready for its stop). Standard library only."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
from pathlib import Path
from types import FrameType

PORT = int(os.environ["MASTER_PORT"])


def stopped(_signal: int, _frame: FrameType | None) -> None:
    time.sleep(3)  # saving its state, as programs do when told to stop
    Path(os.environ["RESULT_DIR"], "never-stored.txt").write_text("a failed job stores none\n")
    print("learner 1: stopped, these are its last words", flush=True)
    sys.exit(143)


def main() -> None:
    if os.environ["LEARNER_ID"] == "1":
        signal.signal(signal.SIGTERM, stopped)
        with socket.create_server(("127.0.0.1", PORT)) as server:
            print("learner 1: training", flush=True)
            server.settimeout(0.1)
            while True:
                with contextlib.suppress(TimeoutError):
                    server.accept()[0].close()
    while True:
        try:
            socket.create_connection(("127.0.0.1", PORT), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    print("learner 2: giving up", flush=True)
    sys.exit(1)


if __name__ == "__main__":
    main()
