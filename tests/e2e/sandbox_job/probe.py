"""A training program that looks for what other jobs on its node left or run, and prints
what it found as one JSON line:

    {"probe": {"<attempt>": "blocked: <why>" | "ESCAPED: <what it got>", ...}, "uid": N, ...}

    python probe.py PLAN_JSON

PLAN_JSON says what to try: `read` (paths of other jobs' files to read), `plant` (a secret
to leave 0600 in /tmp, /var/tmp and /dev/shm for a later job to find), `find` (the secret
an earlier job planted, looked for where it planted it), `proc` (read the command lines and
environments of other uids' processes), `names` (look up the names of the loopback
addresses, as torch's store does of its peers'), `hold` (seconds to keep running after the
report).
Standard library only.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

SHARED_DIRS = ("/tmp", "/var/tmp", "/dev/shm")


def read(path: str | Path) -> str:
    return Path(path).read_bytes()[:80].decode(errors="replace")


def others_processes(what: str) -> list[str] | None:
    """`/proc/PID/<what>` of every process of another uid this program can read."""
    got = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if os.stat(entry.path).st_uid == os.getuid():
                continue
            text = read(f"{entry.path}/{what}")
        except OSError:
            continue
        if text:
            got.append(f"{entry.name}: {text}")
    return got or None


def connect(address: str) -> str:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        conn.sendall(b"set key owned\n")
        return "connected, and a key sent"


def rendezvous() -> str:
    """Learner 1 serves on MASTER_ADDR:MASTER_PORT, the others reach it there."""
    address = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
    if os.environ.get("LEARNER_ID", "1") == "1":
        with socket.create_server(address) as server:
            server.settimeout(120)
            conn, _ = server.accept()
            with conn:
                conn.sendall(b"welcome\n")
        return "met"
    deadline = time.monotonic() + 120
    while True:
        try:
            with socket.create_connection(address, timeout=5) as conn:
                return "met" if conn.recv(80) == b"welcome\n" else "a stranger answered"
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def main() -> None:
    plan = json.loads(sys.argv[1])
    attempts: dict[str, Callable[[], object]] = {}
    for path in plan.get("read", []):
        attempts[f"read {path}"] = lambda path=path: read(path)
    if plan.get("find"):
        name = plan["find"]["name"]
        for directory in SHARED_DIRS:
            attempts[f"find {directory}/{name}"] = lambda d=directory: read(f"{d}/{name}")
    if plan.get("proc"):
        attempts["read other uids' /proc/*/cmdline"] = lambda: others_processes("cmdline")
        attempts["read other uids' /proc/*/environ"] = lambda: others_processes("environ")
    for address in plan.get("connect", []):
        attempts[f"connect {address}"] = lambda address=address: connect(address)
    listener = socket.create_server(("127.0.0.1", 0)) if plan.get("listen") else None
    results = {}
    for name, attempt in attempts.items():
        try:
            got = attempt()
        except OSError as error:
            results[name] = f"blocked: {type(error).__name__}: {error}"
        else:
            results[name] = "blocked: nothing there" if got is None else f"ESCAPED: {got!r}"[:300]
    planted = []
    if plan.get("plant"):
        secret = plan["plant"]
        for directory in SHARED_DIRS:
            path = Path(directory) / secret["name"]
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(secret["text"])
            planted.append(str(path))
    own = ""
    if plan.get("rendezvous"):
        try:
            own = rendezvous()
        except OSError as error:
            own = f"{type(error).__name__}: {error}"
    names = {}
    for address in ("127.0.0.1", "::1", "::ffff:127.0.0.1") if plan.get("names") else ():
        try:
            names[address] = socket.getnameinfo((address, 0), socket.NI_NAMEREQD)[0]
        except OSError as error:
            names[address] = f"{type(error).__name__}: {error}"
    report = {
        "probe": results,
        "names": names,
        "own": own,
        "listening": listener.getsockname()[1] if listener else None,
        "uid": os.getuid(),
        "tmpdir": tempfile.gettempdir(),
        "planted": planted,
    }
    print(json.dumps(report), flush=True)
    time.sleep(float(plan.get("hold", 0)))


if __name__ == "__main__":
    main()
