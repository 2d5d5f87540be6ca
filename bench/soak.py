"""Soak: 1000 short jobs through the embedded platform, and how soon each reaches its end.

Starts the embedded default as a user does (`dlaas up --detach` in a fresh temporary
DLAAS_HOME on a free port; `dlaas down` at the end, always) and runs `--jobs` jobs of
`tests/e2e/burst.py` through it, `--in-flight` unfinished at a time (topped up as jobs end):
half a second of work each, 1 to 4 learners, a fifth failing for good, some failing once
and restarting, some halted and resumed, some deleted while they run. It polls the API
until every job is final (or none became final for `--stall-s`), then reads what the
platform recorded of each job from its SQLite database, read only (a deleted job's events
are no longer served by the API), and checks each with `tests.job_invariants` and against
what its plan must end as.

- `finish_to_final_s`: from the last learner's end (the `exited_at` of its `learner_exit`
  event, or for an exit the reconcile recorded, the time in the learner's own exit report
  in the platform's learner-event stream) to the event of the job's final state, for jobs
  that ended by themselves (COMPLETED, FAILED);
- `stuck`: jobs not final `STUCK_AFTER_S` (60 s) after their last learner ended;
- CPU: where the machine's went over the run: the platform's services (by pid), the
  learners (runners and their programs, which the node agent reaps, so their CPU lands in
  its children's time), this process, and the rest.

Run from the repository root: `python -m bench.soak`. Progress lines every 10 s, then the
FINAL line, one JSON object `{"bench": "soak", ...}`. When anything is wrong (a job not
final, stuck, with problems or duplicated events, or a learner left running) the evidence
(those jobs and their events) goes to stderr and DLAAS_HOME is kept with its service logs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._cpu_meter import CpuSnapshot, cores_used, snapshot, top_consumers
from bench._latency_stats import median, percentile, rounded
from bench._small import parse_with_small
from lifecycle_manager.entrypoints.monitor import CONSUMER_GROUP
from storage import streams
from tests.e2e.burst import (
    STUCK_AFTER_S,
    BurstRun,
    Outcome,
    drive,
    evidence,
    learners_left_running,
    outcomes_of,
    plan_mix,
    progress_line,
)
from tests.e2e.conftest import Platform
from tests.stop_on_signals import unwind_on_stopping_signals

TARGET_FINISH_TO_FINAL_P99_S = 2.0
_CLOCK_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class CpuReading:
    machine: CpuSnapshot
    learners_s: float  # CPU of the learner processes the node agent has reaped
    client_s: float  # this process's CPU


def children_cpu_s(pid: int) -> float:
    """CPU time of the children `pid` has waited for (and of theirs), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / _CLOCK_TICK


def read_cpu(agent_pid: int) -> CpuReading:
    return CpuReading(snapshot(), children_cpu_s(agent_pid), time.process_time())


def cpu_use(before: CpuReading, after: CpuReading, services: dict[str, int]) -> dict[str, Any]:
    """Cores busy between two readings: the machine, each service, the learners, this
    process, and the rest (other work on the machine, and learners still running)."""
    wall_s = after.machine.taken_at - before.machine.taken_at
    machine = cores_used(before.machine, after.machine, ())
    service_cores = {}
    for name, pid in services.items():
        start = before.machine.processes.get(pid, (name, 0.0))[1]
        end = after.machine.processes.get(pid, (name, start))[1]
        service_cores[name] = round((end - start) / wall_s, 2)
    learners = (after.learners_s - before.learners_s) / wall_s
    client = (after.client_s - before.client_s) / wall_s
    others = machine["machine"] - sum(service_cores.values()) - learners - client
    return {
        "machine_cores": machine,
        "service_cores": service_cores,
        "learner_cores": round(learners, 2),
        "client_cores": round(client, 2),
        "others_cores": round(others, 2),
    }


def monitor_backlog(redis_url: str) -> int:
    """Learner events the monitor has not handled yet: not yet read, or read and not
    acknowledged."""
    redis = streams.client(redis_url)
    try:
        for group in redis.xinfo_groups(streams.LEARNER_EVENTS):
            name = group["name"]
            if (name.decode() if isinstance(name, bytes) else name) == CONSUMER_GROUP:
                return int(group.get("lag") or 0) + int(group["pending"])
    finally:
        redis.close()
    return 0


@dataclass
class Progress:
    """Prints a progress line with the CPU and the monitor's backlog since the last one."""

    platform: Platform
    agent_pid: int
    services: dict[str, int]
    last: CpuReading
    backlog_max: int = 0

    def __call__(self, run: BurstRun) -> None:
        now = read_cpu(self.agent_pid)
        cpu = cpu_use(self.last, now, self.services)
        self.last = now
        backlog = monitor_backlog(self.platform.record().redis_url)
        self.backlog_max = max(self.backlog_max, backlog)
        print(
            f"{progress_line(run)}; machine {cpu['machine_cores']['machine']} cores "
            f"(learners {cpu['learner_cores']}, services {cpu['service_cores']}); "
            f"monitor backlog {backlog} events",
            flush=True,
        )


def figures_of(run: BurstRun, outcomes: list[Outcome]) -> dict[str, Any]:
    waits = [o.finish_to_final_s for o in outcomes if o.finish_to_final_s is not None]
    lags = [lag for o in outcomes for lag in o.exit_record_lags]
    final = [o for o in outcomes if o.final]
    run_s = run.ended - run.began
    return {
        "jobs": len(run.jobs),
        "jobs_planned": run.planned,
        "jobs_by_plan": dict(Counter(job.plan.plan.value for job in run.jobs)),
        "learners": sum(job.plan.learners for job in run.jobs),
        "final": len(final),
        "final_by_state": dict(Counter(o.facts.state for o in final)),
        "unfinished": len(run.unfinished),
        "stuck": sum(o.stuck(run.ended) for o in outcomes),
        "target_stuck": 0,
        "stuck_after_s": STUCK_AFTER_S,
        "wrong_final_state": sum(o.wrong_final_state for o in outcomes),
        "target_wrong_final_state": 0,
        "duplicate_events": sum(o.duplicates for o in outcomes),
        "target_duplicate_events": 0,
        "jobs_with_problems": sum(bool(o.problems) for o in outcomes),
        "problem_samples": [
            f"{o.job.job_id} ({o.job.plan.name}): {'; '.join(o.problems)}"
            for o in outcomes
            if o.problems
        ][:5],
        "finish_to_final_p50_s": rounded(median(waits)),
        "finish_to_final_p99_s": rounded(percentile(waits, 99)),
        "target_finish_to_final_p99_s": TARGET_FINISH_TO_FINAL_P99_S,
        "finish_to_final_max_s": rounded(max(waits, default=float("nan"))),
        "finish_to_final_jobs": len(waits),
        "exit_recorded_p50_s": rounded(median(lags)),
        "exit_recorded_p99_s": rounded(percentile(lags, 99)),
        "exits_recorded": len(lags),
        "exits_without_exited_at": sum(
            o.exits_timed_from_stream + o.exits_untimed for o in outcomes
        ),
        "exits_untimed": sum(o.exits_untimed for o in outcomes),
        "jobs_per_min": round(len(final) / run_s * 60, 1) if run_s > 0 else None,
        "run_s": round(run_s, 1),
        "api_errors": len(run.api_errors),
        "api_error_samples": run.api_errors[:3],
    }


def soak(
    args: argparse.Namespace, base: Path, figures: dict[str, Any]
) -> tuple[BurstRun, list[Outcome]]:
    began = time.monotonic()
    platform = Platform.up(base / "home")
    try:
        figures["platform_start_s"] = round(time.monotonic() - began, 2)
        services = dict(platform.record().pids)
        agent_pid = services["agent"]
        before = read_cpu(agent_pid)
        progress = Progress(platform, agent_pid, services, before)
        manifests = base / "manifests"
        manifests.mkdir()
        run = drive(
            platform,
            plan_mix(args.jobs, args.seed),
            manifests,
            in_flight=args.in_flight,
            stall_s=args.stall_s,
            on_progress=progress,
        )
        after = read_cpu(agent_pid)
        outcomes = outcomes_of(platform, run)
        figures.update(figures_of(run, outcomes))
        figures["in_flight"] = args.in_flight
        figures["monitor_backlog_max"] = progress.backlog_max
        cpu = cpu_use(before, after, services)
        figures.update(cpu)
        busy_cpu_s = cpu["machine_cores"]["machine"] * (
            after.machine.taken_at - before.machine.taken_at
        )
        figures["machine_cpu_s_per_job"] = round(busy_cpu_s / max(len(run.jobs), 1), 2)
        figures["learner_cpu_s_per_learner"] = round(
            (after.learners_s - before.learners_s) / max(figures["learners"], 1), 3
        )
        figures["top_other_processes"] = top_consumers(
            before.machine, after.machine, {*services.values(), os.getpid()}
        )
        left = learners_left_running(platform, [job.job_id for job in run.jobs])
        figures["learners_left_running"] = len(left)
        return run, outcomes
    finally:
        platform.down()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument(
        "--in-flight", type=int, default=100, help="unfinished jobs at a time (default 100)"
    )
    parser.add_argument(
        "--stall-s", type=float, default=120.0, help="give up once no job ended for this long"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", action="store_true", help="keep DLAAS_HOME (logs) afterwards")
    return parse_with_small(parser, {"jobs": 10, "in_flight": 10})


def main() -> None:
    unwind_on_stopping_signals()  # killed by a timeout, it still stops its platform
    args = parse_args()
    load_before = os.getloadavg()
    print(f"load average before: {load_before}", flush=True)
    began = time.monotonic()
    base = Path(tempfile.mkdtemp(prefix="dlaas-bench-soak-"))
    figures: dict[str, Any] = {"bench": "soak"}
    keep = args.keep
    try:
        run, outcomes = soak(args, base, figures)
        wrong = [o for o in outcomes if o.wrong or o.stuck(run.ended)]
        if wrong or figures.get("learners_left_running"):
            print(evidence(wrong, limit=20), file=sys.stderr, flush=True)
            keep = True
    except BaseException:
        keep = True
        raise
    finally:
        if keep:
            print(f"kept {base / 'home'} (service logs in its logs/)", flush=True)
        else:
            shutil.rmtree(base, ignore_errors=True)
    figures["bench_wall_s"] = round(time.monotonic() - began, 1)
    figures["load_average_before"] = [round(x, 2) for x in load_before]
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
