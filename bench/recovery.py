"""Recovery on the embedded platform: how soon a killed learner trains again, and what is lost.

Starts the embedded default (`cli.embedded.start`) in a temporary DLAAS_HOME, uploads the
digits data and runs the digits example (2 learners over gloo, fixed seed, a checkpoint every
`--interval` s, `--step-delay` per step) with `restart_policy.max_restarts` above the number
of kills. While it trains, the benchmark kills a learner `--kills` times at random moments
(seeded): once the attempt running has committed a checkpoint of its own, at a uniformly
random time within the next checkpoint interval (so some kills land while a checkpoint is
being written), alternately SIGKILL of a random learner's training program (its runner
reports exit 137) and SIGKILL of a random learner's whole runner process group (the node
agent reports it). Waiting for each attempt's own checkpoint measures recovery as a job
meets it, with progress between failures: a job that keeps failing before it can checkpoint
is backed off by the restart policy on purpose, which is not what this measures. It follows
the job's log
(`GET /v2/jobs/{id}/logs?follow=true`; each line carries the time the runner read it from
the program) and, per kill:

- `recovery_s`: SIGKILL -> the first `step N` line of the restarted attempt (the first step
  completed after restoring), minus `program_startup_s`;
- `program_startup_s`: the training program's own start-up: from the runner's
  `resumes from checkpoint` line (written just after it started the command, so this errs
  short and `recovery_s` long) to that first step (Python and torch imports, gloo
  rendezvous, data, checkpoint load, one step); `torch_import_s`, `python -c "import
  torch"` timed in the same run, is the bulk of it;
- `lost_work_s`: training time redone: the kill's time - the time the restored checkpoint's
  step was printed (or the attempt's first step, if it trained nothing newer). The SDK's
  `CheckpointTimer` saves early enough that a checkpoint is uploaded (the runner looks for
  new ones every 0.1 s) before the interval since the previous one's state has passed, so
  this stays within one checkpoint interval while steps and saves keep their pace.

It also samples the node agent to see whether learners of two attempts of the job ever ran
at once, and counts the jobs the platform lists against the one submitted.

Then, `--stall-runs` times, a scheduling worker dies mid-pass: a process takes the
scheduler's lease on the platform's Redis as a pass does (`bench/_lease_holder.py`, renewing
it every second), a one-learner job is submitted, and the holder is SIGKILLed at a random
moment between two renewals. `scheduler_stall_after_worker_kill_s` (the median; target at
most 5 s) is the kill -> the job's `admitted` event: the dead holder's lease lapsing, the
waiting worker taking it over and its pass.

Last, `--restart-runs` times, the platform restarts under a training job: a digits job with
no periodic checkpoint (an interval of an hour, so its stop checkpoint is the only one it
takes) trains to step 20, the platform is stopped as `dlaas down` stops it
(`cli.embedded.stop`: the worker, then the learners, whose stop checkpoints the API still
takes, then the rest) and started again (on a new API port: clients re-read client.json),
and the job's next attempt prints its first step. `steps_lost_on_platform_restart` (the
most over the runs; target 0) is the last step learner 1 printed before the platform was
started again (as the log follower saw it until the API stopped, or the API has it after)
minus the step that attempt restored (its first step less one). Without the stop
checkpoint every step would be lost: with the learners stopped after the API, a small run
lost 130 of 130.

Run from the repository root: `python -m bench.recovery` (a few minutes). The last line is
the FINAL line, one JSON object `{"bench": "recovery", ...}`. The platform is always stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench._latency_stats import median, percentile, rounded
from bench._lease_holder import HELD
from bench._small import parse_with_small
from cli import embedded
from cli.archive import zip_directory
from cli.client import DlaasClient, DlaasConnectionError
from lifecycle_manager.glue.scheduler_lease import RENEW_EVERY_S
from tests.chaos import processes
from tests.stop_on_signals import unwind_on_stopping_signals

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "digits"
TARGET_RECOVERY_P50_S = 3.0
TARGET_SCHEDULER_STALL_S = 5.0
TARGET_STEPS_LOST_ON_PLATFORM_RESTART = 0
KILLS_REQUIRED = 10  # the figures count only over at least this many kills
FINAL = frozenset({"COMPLETED", "FAILED", "HALTED"})
RESUME = re.compile(r"^\[dlaas\] learner 1 resumes from checkpoint ckpt-(\d+)$")
STEP = re.compile(r"^step (\d+) ")
NO_PERIODIC_S = 3600.0  # the platform-restart job's interval: its stop checkpoint is its only one
STEPS_BEFORE_DOWN = 20
RESTART_JOB_STEPS = 2000  # far more than it trains: it is deleted once it trains again
# A job that only has to be admitted: one learner, a tenth of a CPU, sleeping.
STALL_MANIFEST = (
    "name: scheduler-stall\nlearners: 1\ncpus: 0.1\nmemory: 64Mi\n"
    "framework:\n  name: python\n  command: sleep 30\nrestart_policy:\n  max_restarts: 0\n"
)


@dataclass(frozen=True)
class Line:
    time: float
    learner: int
    text: str


@dataclass
class LogFollower:
    """Every log line of a job, as the API streams it, in a background thread."""

    client: DlaasClient
    job_id: str
    lines: list[Line] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        threading.Thread(target=self._follow, name="log-follower", daemon=True).start()

    def _follow(self) -> None:
        try:
            for event in self.client.iter_log_events(self.job_id, follow=True):
                if event["event"] == "line" and event.get("time") is not None:
                    line = Line(float(event["time"]), int(event["learner"]), str(event["line"]))
                    with self.lock:
                        self.lines.append(line)
        except (DlaasConnectionError, RuntimeError):
            return  # the platform went down, or the client was closed: the lines so far

    def chief(self) -> list[Line]:
        with self.lock:
            return [line for line in self.lines if line.learner == 1]


@dataclass(frozen=True)
class Attempt:
    """An attempt's start as learner 1's log shows it."""

    resumed_at: float  # the runner's resume line, just after it started the command
    restored_step: int
    first_step_at: float | None  # the program's first completed step


def attempts(lines: list[Line]) -> list[Attempt]:
    """Every restored attempt, in order."""
    found = []
    for index, line in enumerate(lines):
        match = RESUME.match(line.text)
        if match is None:
            continue
        first_step = next((ln.time for ln in lines[index + 1 :] if STEP.match(ln.text)), None)
        found.append(Attempt(line.time, int(match.group(1)), first_step))
    return found


def step_printed_before(lines: list[Line], step: int, moment: float) -> float | None:
    """When `step N` was last printed before `moment` (a step may be printed again after a
    restart replays it)."""
    times = [ln.time for ln in lines if ln.time < moment and ln.text.startswith(f"step {step} ")]
    return max(times) if times else None


@dataclass
class Kill:
    at: float
    mode: str  # "program" or "runner"
    learner: int
    attempt: int


@dataclass
class Bench:
    client: DlaasClient
    agent_url: str
    agent_headers: dict[str, str]
    job_id: str
    follower: LogFollower
    overlaps: int = 0
    samples: int = 0

    def job(self) -> dict[str, Any]:
        return self.client.get_job(self.job_id)

    def running_learners(self) -> list[dict[str, Any]]:
        answer = httpx.get(
            f"{self.agent_url}/learners",
            params={"job": self.job_id},
            headers=self.agent_headers,
            timeout=10,
        )
        learners = [r for r in answer.json()["learners"] if r["phase"] == "Running"]
        self.samples += 1
        if len({r["attempt"] for r in learners}) > 1:
            self.overlaps += 1
        return learners

    def wait(self, what: str, check: Any, timeout_s: float = 180.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not check():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} did not happen in {timeout_s} s")
            self.running_learners()
            time.sleep(0.05)

    def checkpointed(self, after: int) -> bool:
        """Whether an attempt later than `after` runs and has committed a checkpoint."""
        attempt = int(self.job()["attempt"])
        return attempt > after and any(
            e["kind"] == "checkpoint" and e["detail"].get("attempt") == attempt
            for e in self.client.job_events(self.job_id)
        )

    def kill(self, mode: str, learner: int) -> Kill:
        attempt = int(self.job()["attempt"])
        runner = next(
            int(r["pid"])
            for r in self.running_learners()
            if r["learner"] == learner and r["attempt"] == attempt
        )
        if mode == "program":
            program = processes.training_pid(runner)
            at = time.time()
            os.kill(program, signal.SIGKILL)
        else:
            at = time.time()
            processes.kill_runner(runner)
        return Kill(at, mode, learner, attempt)


def manifest(
    directory: Path,
    args: argparse.Namespace,
    *,
    name: str = "digits-recovery",
    steps: int | None = None,
    interval_s: float | None = None,
) -> Path:
    """The digits example's manifest with the benchmark's pace and restarts, `steps` steps
    (default `--steps`) and a checkpoint every `interval_s` (default `--interval`) seconds."""
    interval = args.interval if interval_s is None else interval_s
    text = (EXAMPLE / "manifest.yml").read_text()
    flags = (
        f"--seed 0 --epochs 100 --max-steps {steps or args.steps} --step-delay {args.step_delay}"
    )
    text = text.replace("--epochs 12 --seed 0", flags)
    text = text.replace("interval_s: 3", f"interval_s: {interval}")
    text = text.replace("max_restarts: 3", f"max_restarts: {args.kills + 5}")
    assert flags in text and f"interval_s: {interval}" in text
    path = directory / f"{name}.yml"
    path.write_text(text)
    return path


def torch_import_s(runs: int = 3) -> float:
    """`python -c "import torch"` wall time on this machine, now: the bulk of the program's
    own start-up."""
    found = []
    for _ in range(runs):
        began = time.monotonic()
        subprocess.run([sys.executable, "-c", "import torch"], check=True)
        found.append(time.monotonic() - began)
    return median(found)


def event_time(event: dict[str, Any]) -> float:
    moment = datetime.fromisoformat(event["time"])
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def figures_of(
    kills: list[Kill], chief: list[Line], events: list[dict[str, Any]], interval_s: float
) -> dict[str, Any]:
    restarted = attempts(chief)
    recovery, with_startup, startup, lost, lost_steps = [], [], [], [], []
    detect, redeploy = [], []
    exits = [event_time(e) for e in events if e["kind"] == "learner_exit"]
    created = [
        (event_time(e), int(e["detail"]["attempt"]))
        for e in events
        if e["kind"] == "learners_created"
    ]
    first_step = next((line.time for line in chief if STEP.match(line.text)), None)
    for index, kill in enumerate(kills):
        if index >= len(restarted) or restarted[index].first_step_at is None:
            continue
        attempt = restarted[index]
        assert attempt.first_step_at is not None
        total = attempt.first_step_at - kill.at
        own = attempt.first_step_at - attempt.resumed_at
        with_startup.append(total)
        startup.append(own)
        recovery.append(total - own)
        printed = step_printed_before(chief, attempt.restored_step, kill.at)
        killed_from = first_step if index == 0 else restarted[index - 1].first_step_at
        if printed is not None and killed_from is not None:
            lost.append(kill.at - max(printed, killed_from))
        before = [ln for ln in chief if ln.time < kill.at and STEP.match(ln.text)]
        if before:
            last = int(STEP.match(before[-1].text).group(1))  # type: ignore[union-attr]
            lost_steps.append(last - attempt.restored_step)
        later_exits = [t for t in exits if t >= kill.at]
        if later_exits:
            detect.append(min(later_exits) - kill.at)
        next_attempt = [t for t, a in created if a == kill.attempt + 1]
        if next_attempt:
            redeploy.append(next_attempt[0] - kill.at)
    return {
        "recovery_p50_s": rounded(median(recovery)),
        "target_recovery_p50_s": TARGET_RECOVERY_P50_S,
        "recovery_p95_s": rounded(percentile(recovery, 95)),
        "recovery_max_s": rounded(max(recovery, default=float("nan"))),
        "recovery_with_startup_p50_s": rounded(median(with_startup)),
        "recovery_with_startup_max_s": rounded(max(with_startup, default=float("nan"))),
        "program_startup_s": rounded(median(startup)),
        "program_startup_max_s": rounded(max(startup, default=float("nan"))),
        "detect_p50_s": rounded(median(detect)),
        "next_attempt_created_p50_s": rounded(median(redeploy)),
        "lost_work_p50_s": rounded(median(lost)),
        "lost_work_max_s": rounded(max(lost, default=float("nan"))),
        "lost_steps_max": max(lost_steps, default=None),
        "checkpoint_interval_s": interval_s,
        "kills_over_one_interval": sum(1 for x in lost if x > interval_s),
        "recoveries_timed": len(recovery),
        "recovery_s": [round(x, 3) for x in recovery],
        "program_startup_each_s": [round(x, 3) for x in startup],
        "lost_work_s": [round(x, 3) for x in lost],
    }


def admitted_at(client: DlaasClient, job_id: str) -> float | None:
    times = [event_time(e) for e in client.job_events(job_id) if e["kind"] == "admitted"]
    return min(times) if times else None


def scheduler_stall_s(
    client: DlaasClient, redis_url: str, home: Path, chance: random.Random
) -> float:
    """One run: the holder of the scheduler's lease SIGKILLed mid-pass -> the admission of
    the job submitted while it held it."""
    manifest = home / "scheduler-stall.yml"
    manifest.write_text(STALL_MANIFEST)
    model = home / "scheduler-stall-model"
    model.mkdir(exist_ok=True)
    (model / "README").write_text("the job only sleeps\n")
    holder = subprocess.Popen(
        [sys.executable, "-m", "bench._lease_holder", redis_url], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        said = holder.stdout.readline()
        if not said.startswith(HELD):
            raise RuntimeError(f"the lease holder did not take the lease: {said!r}")
        archive = zip_directory(model)
        try:
            job_id = str(client.submit_job(manifest, archive)["id"])
        finally:
            archive.unlink()
        time.sleep(chance.uniform(0.0, RENEW_EVERY_S))  # anywhere between two renewals
        killed_at = time.time()
        holder.kill()
    finally:
        holder.kill()
        holder.wait()
    deadline = time.monotonic() + 60.0
    while (admitted := admitted_at(client, job_id)) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} was not admitted within 60 s of the kill")
        time.sleep(0.05)
    client.delete_job(job_id)
    return admitted - killed_at


def stall_figures(stalls: list[float]) -> dict[str, Any]:
    return {
        "scheduler_stall_after_worker_kill_s": rounded(median(stalls)),
        "target_scheduler_stall_s": TARGET_SCHEDULER_STALL_S,
        "scheduler_stall_max_s": rounded(max(stalls, default=float("nan"))),
        "scheduler_stall_each_s": [round(x, 3) for x in stalls],
    }


def client_of(home: Path) -> DlaasClient:
    """A client of the platform running from `home`, at the URL `start` last wrote: the API's
    port may differ after each start."""
    said = json.loads((home / "client.json").read_text())
    return DlaasClient(str(said["url"]), str(said["token"]))


def submit_digits(client: DlaasClient, manifest_path: Path) -> str:
    archive = zip_directory(EXAMPLE / "model")
    try:
        return str(client.submit_job(manifest_path, archive)["id"])
    finally:
        archive.unlink()


def chief_lines(client: DlaasClient, job_id: str) -> list[Line]:
    """Learner 1's log so far, as the API has it."""
    return [
        Line(float(e["time"]), 1, str(e["line"]))
        for e in client.iter_log_events(job_id, learner=1)
        if e["event"] == "line" and e.get("time") is not None and int(e["learner"]) == 1
    ]


def steps_of(lines: list[Line]) -> list[tuple[float, int]]:
    """(when printed, N) of every `step N` line."""
    return [(ln.time, int(m.group(1))) for ln in lines if (m := STEP.match(ln.text))]


def wait_for(what: str, check: Callable[[], bool], timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen in {timeout_s} s")
        time.sleep(0.2)


@dataclass(frozen=True)
class Restart:
    """One `dlaas down` and `dlaas up` under a training job, as its log shows them."""

    last_step_before: int  # the last step printed before the platform was started again
    first_step_after: int  # the first step the job's next attempt printed
    # `embedded.stop`: the learners and their stop checkpoints, then the rest (the API
    # closes the follower's open stream after its shutdown grace)
    down_s: float
    learners_stopped: bool  # `stop` said it stopped the job's learners

    @property
    def steps_lost(self) -> int:
        """Steps trained before the platform went down that the next attempt did again."""
        return self.last_step_before - (self.first_step_after - 1)


def steps_once_trained_again(home: Path, job_id: str, up_at: float) -> list[tuple[float, int]]:
    """The job's steps as the API has them once its attempt after `up_at` has printed one;
    the job is then deleted."""
    with client_of(home) as client:
        seen: list[tuple[float, int]] = []

        def trained_again() -> bool:
            if client.get_job(job_id)["state"] in FINAL:
                raise RuntimeError(f"job {job_id} ended instead of training again")
            seen[:] = steps_of(chief_lines(client, job_id))
            return any(t >= up_at for t, _ in seen)

        wait_for(f"job {job_id}'s first step after the platform's restart", trained_again)
        client.delete_job(job_id)
    return seen


def platform_restart(home: Path, args: argparse.Namespace, index: int) -> Restart:
    """A digits job with no periodic checkpoint trains a while; the platform is stopped as
    `dlaas down` does and started again; the job's next attempt prints its first step. The
    steps before are what the log follower saw until the API stopped and what the API has
    after the restart: either alone may miss the last lines (the follower those the API no
    longer took, the API those a lost stop never stored)."""
    said: list[str] = []
    with client_of(home) as client:
        name = f"platform-restart-{index}"
        job_id = submit_digits(
            client,
            manifest(home, args, name=name, steps=RESTART_JOB_STEPS, interval_s=NO_PERIODIC_S),
        )
        follower = LogFollower(client, job_id)
        follower.start()
        wait_for(
            f"job {job_id} training to step {STEPS_BEFORE_DOWN}",
            lambda: any(n >= STEPS_BEFORE_DOWN for _, n in steps_of(follower.chief())),
        )
        began = time.monotonic()
        embedded.stop(home, on_step=said.append)
        down_s = time.monotonic() - began
    up_at = time.time()
    embedded.start(home, api_port=embedded.free_port(), on_step=print)
    after = steps_once_trained_again(home, job_id, up_at)
    return Restart(
        last_step_before=max(n for t, n in steps_of(follower.chief()) + after if t < up_at),
        first_step_after=next(n for t, n in after if t >= up_at),
        down_s=down_s,
        learners_stopped=any(job_id in line for line in said),
    )


def restart_figures(restarts: list[Restart]) -> dict[str, Any]:
    lost = [r.steps_lost for r in restarts]
    return {
        "steps_lost_on_platform_restart": max(lost, default=None),
        "target_steps_lost_on_platform_restart": TARGET_STEPS_LOST_ON_PLATFORM_RESTART,
        "platform_restart_runs": len(restarts),
        "steps_lost_on_platform_restart_runs": lost,
        "steps_before_platform_down": [r.last_step_before for r in restarts],
        "platform_down_max_s": rounded(max((r.down_s for r in restarts), default=float("nan"))),
        "platform_restarts_learners_stopped": sum(r.learners_stopped for r in restarts),
    }


def run(args: argparse.Namespace, home: Path, figures: dict[str, Any]) -> None:
    began = time.monotonic()
    platform = embedded.start(home, api_port=embedded.free_port(), on_step=print)
    figures["platform_start_s"] = round(time.monotonic() - began, 2)
    token = json.loads((home / "client.json").read_text())["token"]
    with DlaasClient(platform.url, token) as client:
        client.upload_data("digits-data", "digits.npz", EXAMPLE / "data" / "digits.npz")
        job_id = submit_digits(client, manifest(home, args))
        print(f"job {job_id}: {args.kills} kills planned", flush=True)
        follower = LogFollower(client, job_id)
        follower.start()
        bench = Bench(client, platform.agent_url, platform.agent_headers(), job_id, follower)
        chance = random.Random(args.seed)
        kills: list[Kill] = []
        for index in range(args.kills):
            killed = kills[-1].attempt if kills else 0
            bench.wait(
                f"a checkpoint of an attempt after {killed}",
                lambda k=killed: bench.checkpointed(k) or bench.job()["state"] in FINAL,
            )
            if bench.job()["state"] != "RUNNING":
                print(f"the job is {bench.job()['state']}; stopping after {index} kills")
                break
            pause_until = time.monotonic() + chance.uniform(0.0, args.interval)
            while time.monotonic() < pause_until:
                bench.running_learners()
                time.sleep(0.05)
            mode = "program" if index % 2 == 0 else "runner"
            kill = bench.kill(mode, chance.randint(1, 2))
            kills.append(kill)
            print(f"kill {index + 1}: {mode} of learner {kill.learner}, attempt {kill.attempt}")
        bench.wait("the job's end", lambda: bench.job()["state"] in FINAL, timeout_s=600)
        job = bench.job()
        listed = client.list_jobs()
        events = client.job_events(job_id)
        time.sleep(1.0)  # the follower's last lines
        figures.update(figures_of(kills, follower.chief(), events, args.interval))
        figures.update(
            {
                "kills": len(kills),
                "kills_by_mode": {
                    m: sum(k.mode == m for k in kills) for m in ("program", "runner")
                },
                "job_state": job["state"],
                "job_attempts": job["attempt"],
                "restart_events": sum(e["kind"] == "restart" for e in events),
                "jobs_lost": 0 if job["state"] == "COMPLETED" else 1,
                "jobs_duplicated": len(listed) - 1,
                "attempts_overlapping_samples": bench.overlaps,
                "agent_samples": bench.samples,
            }
        )
        stalls = []
        for index in range(args.stall_runs):
            stalls.append(scheduler_stall_s(client, platform.redis_url, home, chance))
            print(f"scheduler stall {index + 1}: {stalls[-1]:.3f} s", flush=True)
        figures.update(stall_figures(stalls))
    restarts = []
    for index in range(args.restart_runs):
        restarts.append(platform_restart(home, args, index + 1))
        done = restarts[-1]
        print(
            f"platform restart {index + 1}: step {done.last_step_before} printed before down, "
            f"step {done.first_step_after} first after up: {done.steps_lost} steps lost",
            flush=True,
        )
    figures.update(restart_figures(restarts))


def check_kills(figures: dict[str, Any]) -> None:
    """Say, in the figures and on stderr, whether enough kills happened for them to count."""
    kills = int(figures.get("kills", 0))
    figures["kills_required"] = KILLS_REQUIRED
    figures["kills_target_met"] = kills >= KILLS_REQUIRED
    if kills < KILLS_REQUIRED:
        print(
            f"WARNING: only {kills} kills happened, fewer than the {KILLS_REQUIRED} required: "
            "these recovery figures do not meet the target",
            file=sys.stderr,
            flush=True,
        )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=12)
    parser.add_argument("--steps", type=int, default=700, help="the job's --max-steps")
    parser.add_argument("--step-delay", type=float, default=0.05)
    parser.add_argument("--interval", type=float, default=2.0, help="checkpoint interval (s)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep DLAAS_HOME (logs) afterwards")
    parser.add_argument(
        "--stall-runs", type=int, default=5, help="scheduling workers killed mid-pass"
    )
    parser.add_argument(
        "--restart-runs", type=int, default=3, help="platform restarts under a training job"
    )
    small = {"kills": 2, "steps": 150, "interval": 0.5, "stall_runs": 1, "restart_runs": 1}
    return parse_with_small(parser, small)


def main() -> None:
    unwind_on_stopping_signals()  # killed by a timeout, it still stops its platform
    args = parse_args()
    load_before = os.getloadavg()
    print(f"load average before: {load_before}", flush=True)
    for name in [k for k in os.environ if k.startswith("DLAAS_")]:
        del os.environ[name]
    base = Path(tempfile.mkdtemp(prefix="dlaas-bench-recovery-"))
    home = base / "home"
    os.environ["DLAAS_HOME"] = str(home)
    # The benchmark polls far faster than a user may: the API's rate limits are off.
    os.environ["DLAAS_RATE_LIMIT_PER_S"] = os.environ["DLAAS_ADDRESS_RATE_LIMIT_PER_S"] = "0"
    figures: dict[str, Any] = {"bench": "recovery"}
    try:
        figures["torch_import_s"] = rounded(torch_import_s())
        run(args, home, figures)
    finally:
        stopped = embedded.stop(home)
        print(f"stopped: {', '.join(stopped)}", flush=True)
        if args.keep:
            print(f"kept {home}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    figures["load_average_before"] = [round(x, 2) for x in load_before]
    check_kills(figures)
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
