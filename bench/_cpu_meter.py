"""Where the machine's CPU went during a phase: all of it, and by process name.

Reads /proc: the machine's busy time from /proc/stat, and user + system time of every live
process whose name is one of those asked for (e.g. `postgres`, `redis-server`). A process that
exits between two snapshots takes its time with it, so per-name figures are lower bounds.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

_CLOCK_TICK = os.sysconf("SC_CLK_TCK")


def _machine_busy_s() -> float:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(x) for x in fields]
    idle = ticks[3] + ticks[4]  # idle + iowait
    return (sum(ticks[:8]) - idle) / _CLOCK_TICK


def _by_name(names: tuple[str, ...]) -> dict[int, tuple[str, float]]:
    found: dict[int, tuple[str, float]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            text = stat.read_text()
            comm = text[text.index("(") + 1 : text.rindex(")")]
            if comm in names:
                rest = text.rsplit(")", 1)[1].split()
                found[int(stat.parent.name)] = (comm, (int(rest[11]) + int(rest[12])) / _CLOCK_TICK)
    return found


@dataclass
class CpuSnapshot:
    machine_busy_s: float
    processes: dict[int, tuple[str, float]] = field(default_factory=dict)


def snapshot(names: tuple[str, ...]) -> CpuSnapshot:
    return CpuSnapshot(_machine_busy_s(), _by_name(names))


def cores_used(before: CpuSnapshot, after: CpuSnapshot, wall_s: float) -> dict[str, float]:
    """Average cores busy between two snapshots: `machine` and one entry per process name."""
    used: dict[str, float] = {"machine": (after.machine_busy_s - before.machine_busy_s) / wall_s}
    for pid, (name, cpu) in after.processes.items():
        start = before.processes.get(pid, (name, 0.0))[1]
        used[name] = used.get(name, 0.0) + (cpu - start) / wall_s
    return {name: round(value, 2) for name, value in used.items()}
