"""A training program that looks for credentials wherever a learner pod's program can look:
its environment, every other process's environment it can see in /proc, every file of the
directory it shares with its helpers, and the service-account token. It prints what it
found as one JSON line (`{"looked_around": ...}`) for the test to search; standard library
only, as a user's program would be.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
MAX_FILE_BYTES = 1 << 20


def environs() -> dict[str, str]:
    found = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                found[entry.name] = (
                    Path(entry.path, "environ").read_bytes().decode(errors="replace")
                )
            except OSError as error:
                found[entry.name] = f"unreadable: {error}"
    return found


def shared_files(shared: Path) -> dict[str, str]:
    found = {}
    for directory, _dirs, names in os.walk(shared):
        for name in names:
            path = Path(directory, name)
            try:
                found[str(path)] = path.read_bytes()[:MAX_FILE_BYTES].decode(errors="replace")
            except OSError as error:
                found[str(path)] = f"unreadable: {error}"
    return found


def main() -> None:
    shared = Path(os.environ["MODEL_DIR"]).parent
    report = {
        "env": dict(os.environ),
        "environs": environs(),
        "files": shared_files(shared),
        "service_account_token": TOKEN.exists(),
    }
    print(json.dumps({"looked_around": report}), flush=True)


if __name__ == "__main__":
    main()
