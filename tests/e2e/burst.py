"""A burst of short jobs on a running embedded platform, and what each of them must end as.

Shared by `tests/e2e/test_burst.py` (40 jobs submitted at once) and `bench/soak.py` (1000,
a window of them in flight). Every job runs `burst_job/train.py` (half a second of work and
the exit its plan asks for) with 1 to 4 learners:

| plan | what happens | it must end |
| --- | --- | --- |
| succeeds | every learner exits 0 | COMPLETED, no restart |
| fails | the last learner exits 2, listed in `fail_on_exit_codes` | FAILED, no restart |
| recovers | learner 1 exits 1 in the first attempt; the gang restarts | COMPLETED, 1 restart |
| halted | halted once the API shows it RUNNING, resumed once HALTED | COMPLETED, no restart |
| deleted | deleted once the API shows it RUNNING | DELETED |

`drive` submits the jobs, halts, resumes and deletes them as their plans say, and polls the
API until every job is final. `outcomes_of` then reads what the platform recorded of each
job from its database, read only: the job rows, their events and learner rows, those of
deleted jobs included (the API answers a deleted job with 404), and checks them with
`tests.job_invariants` and against the job's plan.

When a learner ended is the `exited_at` of its `learner_exit` event. An exit the reconcile
recorded (it saw the learner finished before the monitor read its report) has none; its
time is then the one the learner's own exit report carries, read from the platform's
`dlaas:learner-events` stream, where the runner and the node agent published it.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, select
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from cli.archive import zip_directory
from cli.client import ApiError, DlaasClient, DlaasConnectionError
from lifecycle_manager.decisions.restart_policy import RestartPolicy
from storage import streams
from storage.db import sync_url
from storage.job_states import ACTIVE_STATES, FINAL_STATES, JobState
from storage.models import Job, JobEvent, Learner
from storage.settings import Settings
from tests.e2e.conftest import Platform
from tests.job_invariants import EventFacts, JobFacts, duplicate_events, settled_problems

BURST_JOB = Path(__file__).resolve().parent / "burst_job"
WORK_S = 0.5
# The first attempt of a job to be halted or deleted waits this long before its work, so the
# halt or delete finds it running: under load the API shows RUNNING only once the learners'
# reports are recorded, which was seen to take over a minute.
HOLD_S = 300.0
FATAL_EXIT_CODE = 2
# A hundred jobs' runners on two cores can each go tens of seconds without the CPU to send a
# heartbeat: the plans expect exact restart counts, and finding hung learners has tests of
# its own (tests/chaos), so a burst's learners are given longer before they count as hung.
HEARTBEAT_TIMEOUT_S = 300
# A job not final this long after its last learner ended is stuck.
STUCK_AFTER_S = 60.0
SUBMITTERS = 8
LIVE_PHASES = ("Pending", "Running")


class Plan(StrEnum):
    SUCCEEDS = "succeeds"
    FAILS = "fails"
    RECOVERS = "recovers"
    HALTED = "halted"
    DELETED = "deleted"


EXPECTED_STATE = {
    Plan.SUCCEEDS: JobState.COMPLETED,
    Plan.FAILS: JobState.FAILED,
    Plan.RECOVERS: JobState.COMPLETED,
    Plan.HALTED: JobState.COMPLETED,
    Plan.DELETED: JobState.DELETED,
}
EXPECTED_RESTARTS = {Plan.SUCCEEDS: 0, Plan.FAILS: 0, Plan.RECOVERS: 1, Plan.HALTED: 0}
# Out of every 20 jobs (a fifth fail for good).
MIX = {Plan.SUCCEEDS: 8, Plan.FAILS: 4, Plan.RECOVERS: 3, Plan.HALTED: 3, Plan.DELETED: 2}


@dataclass(frozen=True)
class JobPlan:
    number: int
    plan: Plan
    learners: int

    @property
    def name(self) -> str:
        return f"burst-{self.number:04d}-{self.plan.value}"

    @property
    def expected_state(self) -> JobState:
        return EXPECTED_STATE[self.plan]

    def command(self) -> str:
        command = f"python train.py --work-s {WORK_S}"
        if self.plan is Plan.FAILS:
            command += f" --fail-learner {self.learners} --exit-code {FATAL_EXIT_CODE}"
        elif self.plan is Plan.RECOVERS:
            command += " --fail-learner 1 --exit-code 1 --fail-attempts 1"
        elif self.plan in (Plan.HALTED, Plan.DELETED):
            command += f" --hold-s {HOLD_S}"
        return command

    def write_manifest(self, directory: Path) -> Path:
        path = directory / f"{self.name}.yml"
        path.write_text(
            f"name: {self.name}\nlearners: {self.learners}\ncpus: 0.1\nmemory: 256Mi\n"
            f"framework:\n  name: python\n  command: {json.dumps(self.command())}\n"
            "restart_policy: {max_restarts: 1, backoff_s: 0.1, backoff_max_s: 0.2, "
            f"heartbeat_timeout_s: {HEARTBEAT_TIMEOUT_S}, "
            f"fail_on_exit_codes: [{FATAL_EXIT_CODE}]}}\n"
        )
        return path


def plan_mix(count: int, seed: int = 0) -> list[JobPlan]:
    """`count` jobs in `MIX`'s proportions, in a seeded random order, each with a seeded
    random number of learners from 1 to 4."""
    chance = random.Random(seed)
    cycle = [plan for plan, share in MIX.items() for _ in range(share)]
    plans = [cycle[number % len(cycle)] for number in range(count)]
    chance.shuffle(plans)
    return [JobPlan(number, plan, chance.randint(1, 4)) for number, plan in enumerate(plans)]


# -- driving the jobs through the API ------------------------------------------------------


@dataclass
class Tracked:
    """A submitted job as the driver follows it through the API."""

    plan: JobPlan
    job_id: str
    state: str = JobState.QUEUED.value  # as the API last showed it
    final_seen_at: float | None = None
    halted_at: float | None = None
    resumed_at: float | None = None
    deleted_at: float | None = None
    refused: list[str] = field(default_factory=list)  # halts, resumes, deletes refused

    @property
    def final(self) -> bool:
        return self.final_seen_at is not None


@dataclass
class BurstRun:
    jobs: list[Tracked]
    planned: int
    began: float  # unix time of the first submission
    ended: float  # when every job was final, or the wait for them gave up
    api_errors: list[str] = field(default_factory=list)  # answers that were not expected

    @property
    def unfinished(self) -> list[Tracked]:
        return [job for job in self.jobs if not job.final]


def drive(
    platform: Platform,
    plans: Sequence[JobPlan],
    directory: Path,
    *,
    in_flight: int | None = None,
    stall_s: float = 120.0,
    on_progress: Callable[[BurstRun], None] | None = None,
    progress_every_s: float = 10.0,
) -> BurstRun:
    """Submit `plans` (all at once, or `in_flight` unfinished at a time, topping up as jobs
    end), halt, resume and delete them as their plans say, and poll the API until every job
    is final; give up once no job was submitted or turned final for `stall_s` seconds."""
    window = in_flight or len(plans)
    waiting = deque(plans)
    run = BurstRun([], len(plans), time.time(), time.time())
    archive = zip_directory(BURST_JOB)
    progressed = reported = time.monotonic()
    try:
        with platform.client() as client, ThreadPoolExecutor(SUBMITTERS) as submitters:
            while True:
                open_jobs = run.unfinished
                room = min(window - len(open_jobs), len(waiting))
                batch = [waiting.popleft() for _ in range(room)]
                submitted = list(
                    submitters.map(lambda plan: _submit(platform, plan, directory, archive), batch)
                )
                run.jobs += submitted
                open_jobs += submitted
                if not open_jobs and not waiting:
                    break
                finished = sum(_follow(client, job, run.api_errors) for job in open_jobs)
                now = time.monotonic()
                if submitted or finished:
                    progressed = now
                elif now - progressed > stall_s:
                    break
                if on_progress is not None and now - reported >= progress_every_s:
                    on_progress(run)
                    reported = now
                time.sleep(0.2)  # between polls of every open job
    finally:
        archive.unlink()
        run.ended = time.time()
    return run


def _submit(platform: Platform, plan: JobPlan, directory: Path, archive: Path) -> Tracked:
    manifest = plan.write_manifest(directory)
    with platform.client() as client:
        job_id = str(client.submit_job(manifest, archive)["id"])
    return Tracked(plan, job_id)


def _follow(client: DlaasClient, job: Tracked, api_errors: list[str]) -> bool:
    """Read the job's state and act on it as its plan says; whether it turned final."""
    try:
        job.state = str(client.get_job(job.job_id)["state"])
    except ApiError as error:
        if error.status != 404 or error.code != "deleted":
            api_errors.append(f"GET {job.job_id}: {error}")
            return False
        job.state = JobState.DELETED.value
    except DlaasConnectionError:
        return False  # the API is busy: ask again on the next poll
    if job.state in FINAL_STATES:
        job.final_seen_at = time.time()
        return True
    plan = job.plan.plan
    if plan is Plan.HALTED and job.state == JobState.RUNNING and job.halted_at is None:
        job.halted_at = _ask(job, "halt", client.halt_job, api_errors)
    elif plan is Plan.HALTED and job.state == JobState.HALTED and job.resumed_at is None:
        job.resumed_at = _ask(job, "resume", client.resume_job, api_errors)
    elif plan is Plan.DELETED and job.state == JobState.RUNNING and job.deleted_at is None:
        job.deleted_at = _ask(job, "delete", client.delete_job, api_errors)
    return False


def _ask(job: Tracked, what: str, request: Callable[[str], object], api_errors: list[str]) -> float:
    """Ask the API to halt, resume or delete the job; when it was asked."""
    asked = time.time()
    try:
        request(job.job_id)
    except ApiError as error:
        if error.status == 409:
            job.refused.append(f"{what} while the API showed {job.state}: {error}")
        else:
            api_errors.append(f"{what} {job.job_id}: {error}")
    except DlaasConnectionError as error:
        api_errors.append(f"{what} {job.job_id}: {error}")
    return asked


def progress_line(run: BurstRun) -> str:
    final = Counter(job.state for job in run.jobs if job.final)
    going = Counter(job.state for job in run.unfinished)
    return (
        f"{time.time() - run.began:.0f} s: submitted {len(run.jobs)}/{run.planned}, "
        f"final {sum(final.values())} {dict(sorted(final.items()))}, "
        f"open {sum(going.values())} {dict(sorted(going.items()))}"
    )


# -- what the platform recorded ------------------------------------------------------------


@dataclass(frozen=True)
class TimedEvent:
    facts: EventFacts
    time: float  # unix time it was recorded
    reason: str


LearnerAttempt = tuple[str, int, int]  # job, learner, attempt


@dataclass(frozen=True)
class Outcome:
    """A job's end as the platform recorded it, checked against its plan."""

    job: Tracked
    facts: JobFacts
    events: tuple[TimedEvent, ...]
    final_at: float | None  # when it entered its final state
    # Its last learner's end: before its final state, or, not final, the last the node
    # agent saw once every learner of the job had ended (None while one runs).
    last_exit_at: float | None
    exit_record_lags: tuple[float, ...]  # for each recorded exit: its recording - its end
    exits_timed_from_stream: int  # exits with no `exited_at`, timed by their exit report
    exits_untimed: int  # exits with neither, timed by when they were recorded
    problems: tuple[str, ...]
    duplicates: int

    @property
    def final(self) -> bool:
        return self.final_at is not None

    @property
    def wrong(self) -> bool:
        """Not final, or recorded against an invariant or its plan."""
        return not self.final or bool(self.problems) or self.duplicates > 0

    @property
    def wrong_final_state(self) -> bool:
        return self.final and self.facts.state != self.job.plan.expected_state

    @property
    def finish_to_final_s(self) -> float | None:
        """From the last learner's end to the job's final state, for a job that ended by
        itself (COMPLETED or FAILED; a deleted job ends when its user says)."""
        if self.final_at is None or self.last_exit_at is None:
            return None
        if self.facts.state == JobState.DELETED:
            return None
        return self.final_at - self.last_exit_at

    def stuck(self, now: float) -> bool:
        """Not final `STUCK_AFTER_S` after its last learner ended."""
        if self.last_exit_at is None or self.facts.state == JobState.DELETED:
            return False
        final_at = self.final_at if self.final_at is not None else now
        return final_at - self.last_exit_at > STUCK_AFTER_S


def outcomes_of(platform: Platform, run: BurstRun) -> list[Outcome]:
    """Every job of the run as the platform's database records it (read only), with the
    node agent's word on when the learners of a job that is not final ended."""
    ids = [job.job_id for job in run.jobs]
    with Session(_read_only_engine(platform.home)) as session:
        rows = {job.id: job for job in session.scalars(select(Job).where(Job.id.in_(ids)))}
        events: dict[str, list[JobEvent]] = {job_id: [] for job_id in ids}
        for event in session.scalars(
            select(JobEvent).where(JobEvent.job_id.in_(ids)).order_by(JobEvent.id)
        ):
            events[event.job_id].append(event)
        learners: dict[str, dict[int, str]] = {job_id: {} for job_id in ids}
        for learner in session.scalars(select(Learner).where(Learner.job_id.in_(ids))):
            learners[learner.job_id][learner.index] = learner.state
    lost = [job_id for job_id in ids if job_id not in rows]
    assert not lost, f"jobs the API accepted are missing from the database: {lost}"
    agent = _agent_learners(platform) if run.unfinished else {}
    ended = reported_exits(platform)
    return [
        _outcome(job, rows[job.job_id], events[job.job_id], learners[job.job_id], agent, ended)
        for job in run.jobs
    ]


def reported_exits(platform: Platform) -> dict[LearnerAttempt, float]:
    """When each learner attempt ended, as its first exit report in the platform's learner
    event stream says."""
    redis = streams.client(platform.record().redis_url)
    ended: dict[LearnerAttempt, float] = {}
    after = "-"
    try:
        while entries := redis.xrange(streams.LEARNER_EVENTS, after, "+", count=5000):
            for _, fields in entries:
                event = streams.decode_learner_event(fields)
                key = (event.job, event.learner, event.attempt)
                if event.kind == streams.EXIT and event.time:
                    ended[key] = min(ended.get(key, event.time), event.time)
            last_id = entries[-1][0]
            after = "(" + (last_id.decode() if isinstance(last_id, bytes) else str(last_id))
    finally:
        redis.close()
    return ended


def _read_only_engine(home: Path) -> Engine:
    database = make_url(sync_url(Settings(home=home, database_url="").database_url)).database
    return create_engine(f"sqlite:///file:{database}?mode=ro&uri=true")


def _agent_learners(platform: Platform) -> dict[str, list[dict[str, Any]]]:
    by_job: dict[str, list[dict[str, Any]]] = {}
    for record in platform.learners():
        by_job.setdefault(str(record["job"]), []).append(record)
    return by_job


def _unix(moment: datetime) -> float:
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _outcome(
    job: Tracked,
    row: Job,
    recorded: Sequence[JobEvent],
    learner_states: dict[int, str],
    agent: dict[str, list[dict[str, Any]]],
    reported: dict[LearnerAttempt, float],
) -> Outcome:
    events = tuple(TimedEvent(EventFacts.of(e), _unix(e.time), e.reason) for e in recorded)
    policy = RestartPolicy.from_manifest(row.manifest)
    facts = JobFacts(
        state=row.state,
        restarts=row.restarts,
        max_restarts=policy.max_restarts,
        learner_states=learner_states,
        events=[event.facts for event in events],
        restart_policy=policy,
    )
    final_at: float | None = None
    last_exit_at: float | None = None
    lags: list[float] = []
    from_stream = untimed = 0
    for event in events:
        if event.facts.kind == "state" and event.facts.to_state in FINAL_STATES:
            final_at = event.time if final_at is None else final_at
        elif event.facts.kind == "learner_exit":
            detail = event.facts.detail
            key = (job.job_id, int(detail["learner"]), int(detail["attempt"]))
            if detail.get("exited_at") is not None:
                ended = float(detail["exited_at"])
            elif key in reported:
                ended = reported[key]
                from_stream += 1
            else:
                ended = event.time
                untimed += 1
            lags.append(event.time - ended)
            if final_at is None:
                last_exit_at = ended if last_exit_at is None else max(last_exit_at, ended)
    if final_at is None:
        last_exit_at = _all_ended_at(agent.get(job.job_id, []))
    problems = [*settled_problems(facts), *_plan_problems(job, facts)]
    return Outcome(
        job,
        facts,
        events,
        final_at,
        last_exit_at,
        tuple(lags),
        from_stream,
        untimed,
        tuple(problems),
        duplicate_events(facts.events),
    )


def _all_ended_at(records: Sequence[dict[str, Any]]) -> float | None:
    """When the last of these learners ended, as the node agent says; None while one runs."""
    ends = [r["finished_at"] for r in records if r["phase"] not in LIVE_PHASES]
    if not records or len(ends) < len(records) or None in ends:
        return None
    return float(max(ends))


def _plan_problems(job: Tracked, facts: JobFacts) -> list[str]:
    """What the job did against what its plan says it must."""
    plan = job.plan.plan
    problems = [f"the API refused to {refusal}" for refusal in job.refused]
    if facts.state != job.plan.expected_state:
        problems.append(
            f"ended {facts.state}; a job that {plan} must end {job.plan.expected_state}"
        )
    restarts = EXPECTED_RESTARTS.get(plan)
    if restarts is not None and facts.restarts != restarts:
        problems.append(f"restarted {facts.restarts} times; a job that {plan}, {restarts}")
    chain = [e.to_state for e in facts.events if e.kind in ("submitted", "state")]
    if plan is Plan.HALTED and JobState.HALTED not in chain:
        problems.append("never HALTED: its halt was not taken")
    if plan is Plan.DELETED and (len(chain) < 2 or chain[-2] not in ACTIVE_STATES):
        problems.append(f"was not deleted while it ran: {' -> '.join(map(str, chain))}")
    return problems


def learners_left_running(
    platform: Platform, job_ids: Sequence[str], timeout_s: float = 30.0
) -> list[dict[str, Any]]:
    """Learners of these (final) jobs the node agent still runs once their stops have had
    `timeout_s` to take effect."""
    wanted = set(job_ids)
    deadline = time.monotonic() + timeout_s
    while True:
        live = [
            record
            for record in platform.learners()
            if record["job"] in wanted and record["phase"] in LIVE_PHASES
        ]
        if not live or time.monotonic() > deadline:
            return live
        time.sleep(0.5)


def evidence(outcomes: Sequence[Outcome], limit: int = 10) -> str:
    """The first `limit` of these jobs, each with what is wrong and its events, for a
    report."""
    lines: list[str] = []
    for outcome in outcomes[:limit]:
        job = outcome.job
        wait = outcome.finish_to_final_s
        waited = "" if wait is None else f", final {wait:.1f} s after its last learner ended"
        lines.append(
            f"{job.job_id} ({job.plan.name}, {job.plan.learners} learners): "
            f"{outcome.facts.state}{waited}; {'; '.join(outcome.problems)}"
        )
        for event in outcome.events:
            facts = event.facts
            moment = datetime.fromtimestamp(event.time, UTC).strftime("%H:%M:%S.%f")[:-3]
            move = f" {facts.from_state} -> {facts.to_state}" if facts.to_state else ""
            lines.append(f"    {moment} {facts.kind}{move}: {event.reason} {dict(facts.detail)}")
    return "\n".join(lines)
