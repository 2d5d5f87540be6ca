"""A log flood on the embedded platform: does every line arrive, and what does it cost?

Starts the embedded default (`cli.embedded.start`) in a temporary DLAAS_HOME and runs two
jobs of 2 learners, one after the other, each learner printing `--lines` metric lines as
fast as it can (`tests/e2e/flood_job/flood.py`; the manifest's regex makes a metric point of
each line), then how long that took by its own clock:

- `print_writer`: `print` per line as a training program does (under dlaas, with
  `PYTHONUNBUFFERED=1`, a write per line), `cpus: 1`: each learner pinned to one core.
- `fast_writer`: the same lines in 64 KiB writes, the most lines a second Python can hand
  the pipe, `cpus: 2`: faster than the live stream takes them, so the live view skips.

While a job runs, two followers read `GET /v2/jobs/{id}/logs?follow=true`: one as fast as it
can, one slowly (small reads with a pause after each). Every live line and gap notice is
checked as it arrives (`tests.e2e.flood.LiveFollow`); after the end the served log and
metrics are compared with what the program wrote. The learners' runners and programs are
sampled in /proc: the runners' CPU, and where each program's time went (on a CPU, waiting
for one, or blocked on its output pipe).

Baseline in the same run: the same program run bare, as many at once as the job has
learners, placed as the node agent places learners (same cores, same niceness), its stdout
to a pipe that a process of the benchmark drains on the same cores, and to /dev/null;
`--bare-runs` runs of each before the jobs and as many after them, medians.

Run from the repository root: `python -m bench.log_flood` (about 2 minutes). The last line
is the FINAL line, one JSON object `{"bench": "log_flood", ...}`: the `print_writer` job's
figures, and the `fast_writer` job's under that key. The platform is always stopped.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench._cpu_meter import CpuSnapshot, snapshot, top_consumers
from bench._latency_stats import median, rounded
from bench._small import parse_with_small
from cli import embedded
from lifecycle_manager.backends.local.agent_learners import LEARNER_NICENESS, nice_session
from tests.e2e.flood import (
    FLOOD_JOB,
    LogCheck,
    SseFollower,
    check_log,
    check_metrics,
    manifest,
    read_log,
    read_metrics,
)
from tests.stop_on_signals import unwind_on_stopping_signals

# The followers stand for users' clients, which run on other machines and take no CPU from
# the learners; on this machine they run at the lowest priority there is, so they take the
# CPU the learners leave (at the learners' own niceness they took half of a busy core).
# Where the kernel schedules sessions as units (autogroup), a thread's niceness counts only
# within its session: the benchmark runs in a session of its own at this niceness, and the
# bare programs each in one at the learners' niceness, as the node agent places learners.
FOLLOWER_NICENESS = 19
_OWN_SESSION = "DLAAS_BENCH_FLOOD_OWN_SESSION"
TARGET_SLOWDOWN = 1.5
FINISHED = frozenset({"COMPLETED", "FAILED", "HALTED", "DELETED"})
CLOCK_TICK = os.sysconf("SC_CLK_TCK")
RUNNER_MARKS = ("dlaas-learner", "learner_image.runner")
PROGRAM_MARK = "flood.py"
DRAIN = "import os\nwhile os.read(0, 1 << 20):\n    pass\n"


# -- where a process's time went -------------------------------------------------------------


@dataclass(frozen=True)
class ProcessTime:
    """A process's life: on a CPU, runnable but waiting for one, and the rest (blocked:
    here, on a full pipe)."""

    life_s: float
    cpu_s: float
    runqueue_s: float

    @property
    def blocked_s(self) -> float:
        return max(0.0, self.life_s - self.cpu_s - self.runqueue_s)


def uptime_s() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def process_time(pid: int, now_s: float | None = None) -> ProcessTime | None:
    """From /proc (readable of a zombie not yet reaped); `now_s`, in seconds since boot, is
    when it ended or was last seen (default: now)."""
    try:
        oncpu_ns, runqueue_ns, _ = Path(f"/proc/{pid}/schedstat").read_text().split()
        rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, ValueError):
        return None
    started_s = int(rest[19]) / CLOCK_TICK
    life = (uptime_s() if now_s is None else now_s) - started_s
    return ProcessTime(life, int(oncpu_ns) / 1e9, int(runqueue_ns) / 1e9)


def summed(times: Sequence[ProcessTime]) -> dict[str, float]:
    return {
        "life_s": round(sum(t.life_s for t in times), 2),
        "cpu_s": round(sum(t.cpu_s for t in times), 2),
        "runqueue_s": round(sum(t.runqueue_s for t in times), 2),
        "blocked_s": round(sum(t.blocked_s for t in times), 2),
    }


# -- the bare baseline ----------------------------------------------------------------------


def placement(learners: int, cpus: float) -> list[set[int] | None]:
    """The cores each learner may use, as the node agent pins them: a learner asking fewer
    cores than the machine has gets ceil(cpus) of them, round robin."""
    available = sorted(os.sched_getaffinity(0))
    count = math.ceil(cpus)
    if count >= len(available):
        return [None] * learners
    return [
        {available[(k * count + i) % len(available)] for i in range(count)} for k in range(learners)
    ]


def bare_env(learner: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLAAS_")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    env["LEARNER_ID"] = str(learner)
    env["PYTHONUNBUFFERED"] = "1"  # as the runner sets it for the command
    return env


def placed(cores: set[int] | None) -> Callable[[], None]:
    """A pre-exec hook that places a process as the node agent places a learner."""

    def place() -> None:  # runs in the child's new session (start_new_session)
        os.nice(LEARNER_NICENESS)
        nice_session(os.getpid(), LEARNER_NICENESS)
        if cores is not None:
            os.sched_setaffinity(0, cores)

    return place


def bare_run(
    lines: int, cores: Sequence[set[int] | None], block: bool, to_pipe: bool
) -> list[tuple[float, ProcessTime | None]]:
    """The program run bare, one per learner at once, its stdout to a pipe drained by a
    process on its cores, or to /dev/null: each one's own seconds and where its time went."""
    reports = Path(tempfile.mkdtemp(prefix="dlaas-bench-flood-bare-"))
    programs: list[subprocess.Popen[bytes]] = []
    drains: list[subprocess.Popen[bytes]] = []
    try:
        with open(os.devnull, "wb") as devnull:
            for learner, pinned in enumerate(cores, 1):
                argv = [sys.executable, "flood.py", "--lines", str(lines)]
                argv += ["--report", str(reports / f"{learner}.txt")]
                if block:
                    argv.append("--block-writes")
                program = subprocess.Popen(
                    argv,
                    cwd=FLOOD_JOB,
                    env=bare_env(learner),
                    stdout=subprocess.PIPE if to_pipe else devnull,
                    preexec_fn=placed(pinned),
                    start_new_session=True,
                )
                programs.append(program)
                if to_pipe:
                    assert program.stdout is not None
                    drains.append(
                        subprocess.Popen(
                            [sys.executable, "-c", DRAIN],
                            stdin=program.stdout,
                            preexec_fn=placed(pinned),
                            start_new_session=True,
                        )
                    )
                    program.stdout.close()
        found = []
        for learner, program in enumerate(programs, 1):
            os.waitid(os.P_PID, program.pid, os.WEXITED | os.WNOWAIT)
            times = process_time(program.pid, uptime_s())
            program.wait()
            found.append((float((reports / f"{learner}.txt").read_text()), times))
        for drain in drains:
            drain.wait()
        return found
    finally:
        shutil.rmtree(reports, ignore_errors=True)


@dataclass
class Phase:
    """One flood job and its bare baseline."""

    name: str
    lines: int
    learners: int
    cpus: float
    block_writes: bool
    pipe: list[tuple[float, ProcessTime | None]] = field(default_factory=list)
    devnull: list[tuple[float, ProcessTime | None]] = field(default_factory=list)

    @property
    def cores(self) -> list[set[int] | None]:
        return placement(self.learners, self.cpus)

    def measure_bare(self, runs: int) -> None:
        for run in range(runs):
            self.pipe += bare_run(self.lines, self.cores, self.block_writes, to_pipe=True)
            self.devnull += bare_run(self.lines, self.cores, self.block_writes, to_pipe=False)
            pipe = [round(s, 3) for s, _ in self.pipe[-self.learners :]]
            null = [round(s, 3) for s, _ in self.devnull[-self.learners :]]
            print(
                f"{self.name}, bare run {run + 1}: to a pipe {pipe} s, to /dev/null {null} s",
                flush=True,
            )

    def baseline_figures(self, under: float) -> dict[str, Any]:
        """`under`: the median of the program's own times under dlaas."""
        pipe = median([s for s, _ in self.pipe])
        null = median([s for s, _ in self.devnull])
        return {
            "program_slowdown": rounded(under / pipe, 2),
            "target_program_slowdown": TARGET_SLOWDOWN,
            "program_slowdown_vs_devnull": rounded(under / null, 2),
            "bare_pipe_s": rounded(pipe),
            "bare_pipe_runs_s": [round(s, 3) for s, _ in self.pipe],
            "bare_pipe_time": summed([t for _, t in self.pipe if t is not None]),
            "bare_devnull_s": rounded(null),
            "bare_devnull_runs_s": [round(s, 3) for s, _ in self.devnull],
            "cpus": self.cpus,
            "cores_per_learner": [sorted(c) if c is not None else "any" for c in self.cores],
            "block_writes": self.block_writes,
        }


# -- the learners' processes -----------------------------------------------------------------


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def is_program(argv: str) -> bool:
    """The flood program's interpreter, not the shell the runner starts it with."""
    return PROGRAM_MARK in argv and not argv.startswith("/bin/sh")


def cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a live process (its threads, not its children)."""
    try:
        rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(rest[11]) + int(rest[12])) / CLOCK_TICK


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


@dataclass
class LearnerSampler:
    """Samples the job's runner processes (found through the node agent, checked by their
    command line) and their programs every `interval_s` until the runners exit: each
    runner's own CPU, and where each program's time went."""

    agent_url: str
    agent_headers: dict[str, str]
    job_id: str
    learners: int
    interval_s: float = 0.05
    runner_cpu: dict[int, float] = field(default_factory=dict)
    programs: dict[int, ProcessTime] = field(default_factory=dict)
    error: str | None = None
    _thread: threading.Thread | None = None

    def start(self) -> LearnerSampler:
        self._thread = threading.Thread(target=self._main, name="learner-sampler", daemon=True)
        self._thread.start()
        return self

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _runners(self) -> list[int]:
        deadline = time.monotonic() + 120
        runners: list[int] = []
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
                listed = httpx.get(
                    f"{self.agent_url}/learners",
                    params={"job": self.job_id},
                    headers=self.agent_headers,
                    timeout=5,
                ).json()["learners"]
                pids = [int(r["pid"]) for r in listed if r.get("pid")]
                # A runner just forked still has the node agent's command line until it execs.
                runners = [p for p in pids if any(m in command_line(p) for m in RUNNER_MARKS)]
                if len(runners) >= self.learners:
                    return runners
            time.sleep(0.01)
        return runners

    def _main(self) -> None:
        runners = self._runners()
        if len(runners) < self.learners:
            self.error = f"found {len(runners)} runner processes of {self.learners}"
        programs: dict[int, int | None] = dict.fromkeys(runners)
        live = set(runners)
        while live:
            for runner in list(live):
                used = cpu_s(runner)
                if used is None:
                    live.discard(runner)
                    continue
                self.runner_cpu[runner] = used
                program = programs[runner]
                if program is None:
                    found = [p for p in descendants(runner) if is_program(command_line(p))]
                    program = programs[runner] = found[0] if found else None
                if program is not None:
                    times = process_time(program)
                    if times is not None and command_line(program):  # not a zombie yet
                        self.programs[program] = times
            time.sleep(self.interval_s)


# -- a job -----------------------------------------------------------------------------------


def model_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.write(FLOOD_JOB / "flood.py", "flood.py")
    return buffer.getvalue()


def group_cpu(pgids: dict[str, int]) -> dict[str, float]:
    """CPU seconds used so far by each named process group (a service and its children)."""
    by_group = {pgid: name for name, pgid in pgids.items()}
    used = dict.fromkeys(pgids, 0.0)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            rest = stat.read_text().rsplit(")", 1)[1].split()
            name = by_group.get(int(rest[2]))
            if name is not None:
                used[name] += (int(rest[11]) + int(rest[12])) / CLOCK_TICK
    return used


def busy_s(before: CpuSnapshot, after: CpuSnapshot) -> float:
    delta = [b - a for a, b in zip(before.machine_ticks, after.machine_ticks, strict=True)]
    return (sum(delta) - delta[3] - delta[4]) / CLOCK_TICK


def wait_final(client: httpx.Client, job_id: str, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        job: dict[str, Any] = client.get(f"/v2/jobs/{job_id}").json()
        if job["state"] in FINISHED or time.monotonic() > deadline:
            return job
        time.sleep(0.1)


def submit(client: httpx.Client, phase: Phase) -> str:
    name = f"bench-flood-{phase.name.replace('_', '-')}"
    text = manifest(name, phase.lines, phase.learners, phase.cpus, phase.block_writes)
    files = {
        "manifest": ("manifest.yml", text.encode(), "application/x-yaml"),
        "model": ("model.zip", model_zip(), "application/zip"),
    }
    answer = client.post("/v2/jobs", files=files)
    if answer.status_code != 201:
        raise RuntimeError(f"submit refused: {answer.status_code} {answer.text}")
    return str(answer.json()["id"])


def follower_line(name: str, follower: SseFollower) -> str:
    return (
        f"{name}: {follower.lines_seen:,} lines, {follower.gap_notices} gap notices "
        f"({follower.lines_skipped:,} lines), end {follower.end_state}"
    )


def flood_job(
    platform: embedded.Platform, token: str, phase: Phase, args: argparse.Namespace
) -> dict[str, Any]:
    learners, lines = phase.learners, phase.lines
    client = httpx.Client(
        base_url=platform.url, headers={"Authorization": f"Bearer {token}"}, timeout=120
    )
    with client:
        groups_before = group_cpu(platform.pids)
        machine_before = snapshot()
        bench_before = sum(os.times()[:2])
        began = time.monotonic()
        job_id = submit(client, phase)
        print(f"{phase.name}: job {job_id}, {learners} learners x {lines:,} lines", flush=True)
        sampler = LearnerSampler(
            platform.agent_url, platform.agent_headers(), job_id, learners
        ).start()
        normal = SseFollower(platform.url, token, job_id, learners, lines, nice=FOLLOWER_NICENESS)
        slow = SseFollower(
            platform.url,
            token,
            job_id,
            learners,
            lines,
            pause=lambda: time.sleep(args.slow_pause_s),
            read_bytes=args.slow_read_bytes,
            nice=FOLLOWER_NICENESS,
            name="slow-follower",
        )
        if not args.no_follow:
            normal.start()
            slow.start()
        job = wait_final(client, job_id, args.timeout)
        final_s = time.monotonic() - began
        machine_after = snapshot()
        bench_s = sum(os.times()[:2]) - bench_before
        groups_after = group_cpu(platform.pids)
        print(f"job {job['state']} after {final_s:.1f} s: {job.get('reason', '')}", flush=True)
        sampler.join(30)
        normal.join(args.timeout)
        print(follower_line("follower", normal), flush=True)
        slow.join(args.timeout)
        print(follower_line("slow follower", slow), flush=True)
        checks: list[LogCheck] = []
        metric_problems: list[str] = []
        points_served = 0
        for learner in range(1, learners + 1):
            checks.append(check_log(learner, lines, read_log(client, job_id, learner)))
            points = read_metrics(client, job_id, learner)
            points_served += len(points)
            metric_problems += check_metrics(learner, lines, points)
            del points
        served_all = read_log(client, job_id).count("\n")
    live_problems = [] if args.no_follow else normal.all_problems() + slow.all_problems()
    runner_cpu = sum(sampler.runner_cpu.values())
    programs = list(sampler.programs.values())
    services = {name: groups_after[name] - groups_before[name] for name in groups_after}
    wall = machine_after.taken_at - machine_before.taken_at
    busy = busy_s(machine_before, machine_after)
    ours = sum(services.values()) + runner_cpu + sum(t.cpu_s for t in programs) + bench_s
    span = (normal.last_line_at or 0.0) - (normal.first_line_at or 0.0)
    return {
        "job_id": job_id,
        "job_state": job["state"],
        "job_wall_s": round(final_s, 2),
        "lines_written": learners * (lines + 1),
        "lines_served_after_end": served_all,
        "lines_equal": all(c.equal for c in checks),
        "log_differences": [c.first_difference for c in checks if not c.equal],
        "metric_points_written": learners * lines,
        "metric_points_served_after_end": points_served,
        "metric_points_equal": not metric_problems,
        "metric_problems": metric_problems[:5],
        "gap_notices_exact": None if args.no_follow else not live_problems,
        "live_problems": live_problems[:10],
        "live_lines_seen": normal.lines_seen,
        "gap_notices": normal.gap_notices,
        "live_lines_skipped": normal.lines_skipped,
        "last_line_before_end": normal.done_before_end,
        "slow_live_lines_seen": slow.lines_seen,
        "slow_gap_notices": slow.gap_notices,
        "slow_live_lines_skipped": slow.lines_skipped,
        "slow_last_line_before_end": slow.done_before_end,
        "reconnects": normal.reconnects + slow.reconnects,
        "follow_s": rounded((normal.ended_at or math.nan) - began, 2),
        "slow_follow_s": rounded((slow.ended_at or math.nan) - began, 2),
        "live_lines_per_s": rounded(normal.lines_seen / span if span > 0 else math.nan, 0),
        "program_s": [c.seconds for c in checks],
        "program_time": summed(programs),
        "programs_sampled": len(programs),
        "runner_cpu_s": round(runner_cpu, 2),
        "runner_cpu_s_per_million_lines": rounded(
            runner_cpu / (learners * lines / 1e6) if sampler.runner_cpu else math.nan, 2
        ),
        "runners_sampled": len(sampler.runner_cpu),
        "sampling_error": sampler.error,
        "service_cpu_s": {name: round(used, 2) for name, used in services.items()},
        "bench_cpu_s": round(bench_s, 2),
        "machine_cores": round(busy / wall, 2),
        "others_cores": round((busy - ours) / wall, 2),
        "top_processes": top_consumers(machine_before, machine_after, {os.getpid()}, 5),
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=500_000, help="lines per learner")
    parser.add_argument("--learners", type=int, default=2)
    parser.add_argument("--cpus", type=float, default=1.0, help="the print writer's cpus")
    parser.add_argument("--fast-lines", type=int, default=1_000_000, help="of the fast writer")
    parser.add_argument("--fast-cpus", type=float, default=2.0, help="of the fast writer")
    parser.add_argument("--no-fast-writer", action="store_true", help="the first job only")
    parser.add_argument("--bare-runs", type=int, default=2, help="before the jobs, and after")
    parser.add_argument("--slow-read-bytes", type=int, default=16 << 10)
    parser.add_argument("--slow-pause-s", type=float, default=0.0025)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--no-follow", action="store_true", help="no followers (their cost)")
    parser.add_argument("--keep", action="store_true", help="keep DLAAS_HOME (logs) afterwards")
    return parse_with_small(parser, {"lines": 5_000, "fast_lines": 10_000, "bare_runs": 1})


def in_own_session() -> int | None:
    """Run the benchmark again in a session of its own (see FOLLOWER_NICENESS) and return
    its exit status; None when this is that run. Lowering the session's priority must not
    lower the terminal's."""
    if os.environ.get(_OWN_SESSION) == "1" and os.getsid(0) == os.getpid():
        del os.environ[_OWN_SESSION]
        nice_session(os.getpid(), FOLLOWER_NICENESS)
        return None
    child = subprocess.Popen(
        [sys.executable, "-m", "bench.log_flood", *sys.argv[1:]],
        env={**os.environ, _OWN_SESSION: "1"},
        start_new_session=True,
    )
    try:
        return child.wait()
    except KeyboardInterrupt:
        child.send_signal(signal.SIGINT)  # the platform is stopped on the way out
        return child.wait()


def main() -> None:
    status = in_own_session()
    if status is not None:
        sys.exit(status)
    unwind_on_stopping_signals()  # killed by a timeout, it still stops its platform
    args = parse_args()
    load_before = os.getloadavg()
    print(f"load average before: {load_before}", flush=True)
    phases = [Phase("print_writer", args.lines, args.learners, args.cpus, block_writes=False)]
    if not args.no_fast_writer:
        phases.append(
            Phase("fast_writer", args.fast_lines, args.learners, args.fast_cpus, block_writes=True)
        )
    for phase in phases:
        phase.measure_bare(args.bare_runs)
    for name in [k for k in os.environ if k.startswith("DLAAS_")]:
        del os.environ[name]
    base = Path(tempfile.mkdtemp(prefix="dlaas-bench-flood-"))
    home = base / "home"
    os.environ["DLAAS_HOME"] = str(home)
    # The benchmark polls far faster than a user may: the API's rate limits are off.
    os.environ["DLAAS_RATE_LIMIT_PER_S"] = os.environ["DLAAS_ADDRESS_RATE_LIMIT_PER_S"] = "0"
    # The fast writer asks for more cores than a 2-core machine has (its learners share
    # them, as the bare runs do): the embedded node is told it has enough to admit it.
    asked = max(phase.learners * phase.cpus for phase in phases)
    os.environ["DLAAS_LOCAL_CPUS"] = str(max(asked, os.cpu_count() or 1))
    figures: dict[str, Any] = {"bench": "log_flood"}
    measured: list[dict[str, Any]] = []
    try:
        began = time.monotonic()
        platform = embedded.start(home, api_port=embedded.free_port(), on_step=print)
        figures["platform_start_s"] = round(time.monotonic() - began, 2)
        token = json.loads((home / "client.json").read_text())["token"]
        for phase in phases:
            measured.append(flood_job(platform, token, phase, args))
    finally:
        stopped = embedded.stop(home)
        print(f"stopped: {', '.join(stopped)}", flush=True)
        if args.keep:
            print(f"kept {home}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    for phase in phases:
        phase.measure_bare(args.bare_runs)
    for phase, found in zip(phases, measured, strict=True):
        under = median([s for s in found["program_s"] if s is not None] or [math.nan])
        found.update(phase.baseline_figures(under))
    figures.update(measured[0])
    if len(measured) > 1:
        figures["fast_writer"] = measured[1]
    figures["load_average_before"] = [round(x, 2) for x in load_before]
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
