"""A learner's processes as a chaos test (or the recovery benchmark) sees them.

The node agent runs each learner as a runner (`dlaas-learner`, the pid the agent lists) in a
process group of its own; the runner starts the user's command, `/bin/sh -c COMMAND`, in a
session of its own, and the training program runs under that shell. Killing "a learner" is
either SIGKILL of the training program (the runner lives on and reports the exit) or SIGKILL
of the runner's group (the agent reports it; the kernel takes the command down with it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def _parents() -> dict[int, int]:
    """Every live process's parent pid."""
    parents = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z":
            parents[int(entry.name)] = int(fields[1])
    return parents


def descendants(pid: int) -> list[int]:
    """The live processes under `pid`, nearest first."""
    children: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    found: list[int] = []
    frontier = [pid]
    while frontier:
        frontier = [child for parent in frontier for child in sorted(children.get(parent, []))]
        found.extend(frontier)
    return found


def command_line(pid: int) -> list[str]:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    return []


def runs(pid: int, program: str) -> bool:
    """Whether `pid` runs the script `program` (`python train.py ...`; the shell that started
    it, `sh -c "python train.py ..."`, does not)."""
    return any(arg == program or arg.endswith(f"/{program}") for arg in command_line(pid))


def training_pid(runner_pid: int, program: str = "train.py", timeout_s: float = 30.0) -> int:
    """The training program under a runner; waits for it to start."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = [pid for pid in descendants(runner_pid) if runs(pid, program)]
        if found:
            return found[0]
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {program} under runner {runner_pid} after {timeout_s} s")
        time.sleep(0.02)


def kill_training(runner_pid: int, program: str = "train.py") -> int:
    """SIGKILL the training program (the runner reports exit 137); its pid."""
    pid = training_pid(runner_pid, program)
    os.kill(pid, signal.SIGKILL)
    return pid


def kill_runner(runner_pid: int) -> None:
    """SIGKILL the runner's process group (the node agent reports the exit)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(runner_pid, signal.SIGKILL)


def kill_session(runner_pid: int) -> None:
    """SIGKILL everything of a learner, runner and command, as losing its node would."""
    groups = {runner_pid}
    for pid in descendants(runner_pid):
        with contextlib.suppress(ProcessLookupError):
            groups.add(os.getpgid(pid))
    for group in groups:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)


def freeze(runner_pid: int, program: str = "train.py") -> None:
    """SIGSTOP the whole learner, runner and command, as a frozen container or node would be:
    it neither exits nor sends heartbeats."""
    command_group = os.getpgid(training_pid(runner_pid, program))
    os.killpg(runner_pid, signal.SIGSTOP)
    os.killpg(command_group, signal.SIGSTOP)


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def wait_gone(pid: int, timeout_s: float = 10.0) -> bool:
    """Whether `pid` ended within the timeout."""
    deadline = time.monotonic() + timeout_s
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
