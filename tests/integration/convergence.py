"""What the model-based convergence tests share (`test_lifecycle_convergence`,
`test_kubernetes_convergence`): the worker's queue of tasks, the API's halt, resume and
delete as a user's request reaches them, a clock the test moves, and a job's events.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select

from api.auth import Principal
from api.errors import DlaasError
from api.services import jobs as api_jobs
from lifecycle_manager.decisions.restart_policy import RestartPolicy
from lifecycle_manager.glue import operations
from lifecycle_manager.glue.context import Context
from storage import jobs as repo
from storage.job_states import STOPPED_STATES, JobState
from storage.models import JobEvent
from tests.job_invariants import EventFacts, JobFacts


class TaskKind:
    DEPLOY = "deploy"
    HALT = "halt"
    RESUME = "resume"
    DELETE = "delete"
    RECOVER = "recover"


OPERATIONS: dict[str, Callable[[Context, str], Awaitable[operations.Outcome]]] = {
    TaskKind.DEPLOY: operations.deploy_job,
    TaskKind.HALT: operations.halt_job,
    TaskKind.RESUME: operations.resume_job,
    TaskKind.DELETE: operations.delete_job,
    TaskKind.RECOVER: operations.recover_job,
}
USER_REQUESTS = {
    "halt": api_jobs.halt_job,
    "resume": api_jobs.resume_job,
    "delete": api_jobs.delete_job,
}


@dataclass(frozen=True)
class Task:
    kind: str
    job_id: str


class TaskQueue:
    """The worker's queue: nudges from the API (it is the API's `Nudger`), restarts the
    monitor schedules, retries. The test runs a task, or loses one, when it chooses."""

    def __init__(self) -> None:
        self.tasks: list[Task] = []

    def send(self, kind: str, job_id: str) -> None:
        self.tasks.append(Task(kind, job_id))

    def deploy(self, job_id: str) -> None:
        self.send(TaskKind.DEPLOY, job_id)

    def halt(self, job_id: str) -> None:
        self.send(TaskKind.HALT, job_id)

    def resume(self, job_id: str) -> None:
        self.send(TaskKind.RESUME, job_id)

    def delete(self, job_id: str) -> None:
        self.send(TaskKind.DELETE, job_id)

    async def run_one(self, ctx: Context, pick: int) -> str | None:
        """Run one task as a Celery worker does: an outcome that asks for a retry, or an
        error, puts it back in the queue. What happened, or None when there was none."""
        if not self.tasks:
            return None
        task = self.tasks.pop(pick % len(self.tasks))
        try:
            outcome = await OPERATIONS[task.kind](ctx, task.job_id)
        except Exception as error:  # a Celery task retries on any error (`autoretry_for`)
            self.tasks.append(task)
            return f"task {task.kind} {task.job_id}: {error!r}, to be retried"
        if outcome.retry_after is not None:
            self.tasks.append(task)
        return f"task {task.kind} {task.job_id}: {outcome.message}"

    def lose(self, pick: int) -> Task | None:
        return self.tasks.pop(pick % len(self.tasks)) if self.tasks else None


@dataclass
class ApiSide:
    """What the job services use of the API's state."""

    nudger: TaskQueue


async def user_asks(
    ctx: Context, queue: TaskQueue, user: Principal, request: str, job_id: str
) -> DlaasError | None:
    """A user's halt, resume or delete through the job services, as the route calls them;
    the API's refusal (the job finished, is not halted, was deleted), or None."""
    side: Any = ApiSide(queue)
    try:
        async with ctx.sessions() as session:
            await USER_REQUESTS[request](side, session, user, job_id)
    except DlaasError as refusal:
        return refusal
    return None


class ShiftedClock:
    """Real time plus what the test let pass: rows and events are stamped in real time."""

    def __init__(self) -> None:
        self.shift = timedelta()

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.shift


async def job_events(ctx: Context, job_id: str) -> list[EventFacts]:
    async with ctx.sessions() as session:
        return [EventFacts.of(event) for event in await repo.list_events(session, job_id)]


async def events_of_jobs(ctx: Context, job_ids: list[str]) -> dict[str, list[EventFacts]]:
    """`job_events` of many jobs in one query."""
    query = select(JobEvent).where(JobEvent.job_id.in_(job_ids)).order_by(JobEvent.id)
    events: dict[str, list[EventFacts]] = {job_id: [] for job_id in job_ids}
    async with ctx.sessions() as session:
        for event in (await session.execute(query)).scalars():
            events[event.job_id].append(EventFacts.of(event))
    return events


async def jobs_settled(ctx: Context, job_ids: Iterable[str]) -> bool:
    """Whether every job is stopped for good: not a halted job its user resumed (it is
    to be deployed again), not a deleted job whose purge has not happened yet."""
    for job_id in job_ids:
        job = await load_job(ctx, job_id)
        if JobState(job.state) not in STOPPED_STATES:
            return False
        if job.state == JobState.HALTED and job.desired == "run":
            return False
        events = await job_events(ctx, job_id)
        if job.state == JobState.DELETED and not any(e.kind == "purged" for e in events):
            return False
    return True


async def load_job(ctx: Context, job_id: str) -> Any:
    async with ctx.sessions() as session:
        job = await repo.get_job_any(session, job_id)
    assert job is not None
    return job


@dataclass(frozen=True)
class StoredJob:
    """What the database holds of a job once the run settled: its row, its learner rows
    and its events."""

    job: Any
    learners: list[Any]
    events: list[EventFacts]

    def facts(self, max_restarts: int, policy: RestartPolicy | None = None) -> JobFacts:
        return JobFacts(
            state=self.job.state,
            restarts=self.job.restarts,
            max_restarts=max_restarts,
            learner_states={row.index: row.state for row in self.learners},
            events=self.events,
            restart_policy=policy,
        )


async def read_stored_job(ctx: Context, job_id: str) -> StoredJob:
    job = await load_job(ctx, job_id)
    events = await job_events(ctx, job_id)
    async with ctx.sessions() as session:
        learners = list(await repo.learners_of(session, job_id))
    return StoredJob(job, learners, events)
