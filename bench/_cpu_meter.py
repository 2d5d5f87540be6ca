"""Where the machine's CPU went during a phase: all of it, by process name, and the top users.

Reads /proc: the machine's busy time from /proc/stat, and user + system time of every live
process (kernel threads included). A process that exits between two snapshots takes its time
with it, so per-process figures are lower bounds.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

_CLOCK_TICK = os.sysconf("SC_CLK_TCK")


_STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def _machine_ticks() -> list[int]:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    return [int(x) for x in fields[: len(_STAT_FIELDS)]]


def _busy(ticks: list[int]) -> float:
    """Seconds busy: everything but idle and iowait (steal included: the CPU was not ours)."""
    return (sum(ticks) - ticks[3] - ticks[4]) / _CLOCK_TICK


def _processes() -> dict[int, tuple[str, float]]:
    found: dict[int, tuple[str, float]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            text = stat.read_text()
            comm = text[text.index("(") + 1 : text.rindex(")")]
            rest = text.rsplit(")", 1)[1].split()
            found[int(stat.parent.name)] = (comm, (int(rest[11]) + int(rest[12])) / _CLOCK_TICK)
    return found


@dataclass
class CpuSnapshot:
    taken_at: float
    machine_ticks: list[int]
    processes: dict[int, tuple[str, float]] = field(default_factory=dict)


def snapshot() -> CpuSnapshot:
    return CpuSnapshot(time.monotonic(), _machine_ticks(), _processes())


def _used_by_process(before: CpuSnapshot, after: CpuSnapshot) -> dict[int, tuple[str, float]]:
    used = {}
    for pid, (name, cpu) in after.processes.items():
        start = before.processes.get(pid, (name, 0.0))[1]
        used[pid] = (name, cpu - start)
    return used


def cores_used(before: CpuSnapshot, after: CpuSnapshot, names: tuple[str, ...]) -> dict[str, float]:
    """Average cores busy between two snapshots: `machine` (with its `steal`, `softirq` and
    `iowait` shares, which no process is charged with) and one entry per process name."""
    wall_s = after.taken_at - before.taken_at
    delta = [b - a for a, b in zip(before.machine_ticks, after.machine_ticks, strict=True)]
    used: dict[str, float] = {"machine": _busy(delta) / wall_s}
    for stat in ("steal", "softirq", "iowait"):
        used[stat] = delta[_STAT_FIELDS.index(stat)] / _CLOCK_TICK / wall_s
    for name, cpu in _used_by_process(before, after).values():
        if name in names:
            used[name] = used.get(name, 0.0) + cpu / wall_s
    return {name: round(value, 2) for name, value in used.items()}


def top_consumers(
    before: CpuSnapshot, after: CpuSnapshot, exclude_pids: set[int], count: int = 5
) -> list[tuple[str, float]]:
    """The process names (summed over their processes) that used the most cores."""
    wall_s = after.taken_at - before.taken_at
    by_name: dict[str, float] = {}
    for pid, (name, cpu) in _used_by_process(before, after).items():
        if pid not in exclude_pids:
            by_name[name] = by_name.get(name, 0.0) + cpu
    ranked = sorted(by_name.items(), key=lambda item: item[1], reverse=True)[:count]
    return [(name, round(cpu / wall_s, 2)) for name, cpu in ranked if cpu > 0]
