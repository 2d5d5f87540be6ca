"""Model-based test: every job converges, whatever the order and timing of what acts on it.

Hypothesis drives, in generated orders, everything that acts on jobs in the service: the
monitor (a batch of learner events), the reconcile, the worker's tasks (deploy, halt,
resume, delete, recover; each may be lost, or retried), the API's halt, resume and delete,
and several of these at once, their awaits interleaved. Learners run on a simulated
cluster (`simulated_cluster`) that lets them progress, checkpoint, end, fail, hang, be
interrupted or vanish between any two steps, and whose reports are delivered late, ahead
of other learners' reports, twice or never; the cluster may be unreachable or full for a
while; time passes by an injected clock.

After each step, every job's events must still form one chain (no transition recorded
twice or skipped). After each run, the platform is left to settle: the learners still
running end with exit 0, undelivered reports arrive, and only the monitor, the reconcile and
the remaining tasks run. Then every job must be in the state its learners and its user
dictate (`tests.job_invariants`): DELETED if deleted, HALTED if halted, else COMPLETED, or
FAILED only after a failure the restart policy refused; its restarts within the policy.

The real database (SQLite and PostgreSQL) and the real Redis stream carry it all.
`DLAAS_CONVERGENCE_EXAMPLES` raises the number of runs for a longer search.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from api.auth import Principal
from lifecycle_manager.entrypoints.monitor import CONSUMER_GROUP, Monitor
from lifecycle_manager.glue.context import Context, Timings
from lifecycle_manager.glue.learner_reports import apply_silence
from lifecycle_manager.glue.reconcile import reconcile
from storage import jobs as repo
from storage import streams
from storage.db import make_engine, make_sessionmaker
from storage.job_states import JobState
from storage.object_store import open_object_store
from storage.settings import Settings
from storage.users import create_user
from tests import services
from tests.integration import test_lifecycle_harness as harness
from tests.integration.convergence import (
    ShiftedClock,
    TaskKind,
    TaskQueue,
    events_of_jobs,
    jobs_settled,
    load_job,
    read_stored_job,
    user_asks,
)
from tests.integration.simulated_cluster import SimulatedCluster, SimulatedLearner
from tests.job_invariants import (
    EventFacts,
    event_problems,
    settled_problems,
    story,
)

database_url = harness.database_url

EXAMPLES = int(os.environ.get("DLAAS_CONVERGENCE_EXAMPLES", "25"))
MAX_JOBS = 4
SETTLE_ROUNDS = 40
TIMINGS = Timings(stop_wait_s=0.0, restart_grace_s=0.0)
PICK = st.integers(min_value=0, max_value=1_000_000)
# What a running learner does next, weighted towards progress and ends.
LEARNER_HAPPENINGS = [
    *["progress"] * 4,
    "checkpoint",
    *["exit 0"] * 3,
    "exit 1",
    "exit 3",
    "exit 137",
    "interrupted",
    "vanish",
    "hang",
]
# What the platform's processes do next (the worker most: every operation is one of its tasks).
PLATFORM_ACTORS = [
    "monitor",
    "monitor",
    "reconcile",
    "task",
    "task",
    "task",
    "task lost",
    "time passes 2",
    "time passes 20",
    "cluster down",
    "cluster up",
    "cluster up",
    "cluster full",
    "cluster has room",
    "user",
]
# What a user does to one of the jobs now and then.
USER_ACTIONS = ["halt", "resume", "delete", "nothing", "nothing", "nothing"]
JOB_SHAPES = st.tuples(
    st.integers(min_value=1, max_value=3),  # learners
    st.integers(min_value=0, max_value=2),  # max_restarts
    st.sampled_from(["gang", "learner"]),  # restart_policy.scope
    st.booleans(),  # its deploy nudge arrives
)


@dataclass
class JobModel:
    """What the test did to a job, from which its final state follows."""

    max_restarts: int
    desired: str = "run"  # as the API last accepted: run, halt or delete
    failures: int = 0  # failures the test caused (non-zero exits, vanishing, hangs)


@dataclass
class Platform:
    ctx: Context
    cluster: SimulatedCluster
    queue: TaskQueue
    clock: ShiftedClock
    monitor: Monitor
    user: Principal
    jobs: dict[str, JobModel] = field(default_factory=dict)


async def open_platform(settings_: Settings, rng: random.Random) -> Platform:
    engine = make_engine(settings_.database_url, pool_size=4)
    clock = ShiftedClock()
    cluster = SimulatedCluster(rng)
    queue = TaskQueue()

    async def schedule_recovery(job_id: str, delay_s: float) -> None:
        queue.send(TaskKind.RECOVER, job_id)

    ctx = Context(
        settings=settings_,
        engine=engine,
        sessions=make_sessionmaker(engine),
        backend=cluster,
        redis=streams.async_client(settings_.redis_url),
        objects=open_object_store(settings_),
        schedule_recovery=schedule_recovery,
        timings=TIMINGS,
        clock=clock,
    )
    await streams.aensure_learner_group(ctx.redis, CONSUMER_GROUP)
    monitor = Monitor(ctx, services.unique_name("model-monitor"))
    async with ctx.sessions.begin() as session:
        user, _token = await create_user(session, services.unique_name("user"))
    principal = Principal(user.id, user.name, is_admin=False)
    return Platform(ctx, cluster, queue, clock, monitor, principal)


class Convergence(RuleBasedStateMachine):
    """One run: a few jobs and a generated story of what happens to them."""

    def __init__(self, settings_: Settings) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.settings = settings_
        self.platform: Platform | None = None

    def run(self, step: Awaitable[Any]) -> Any:
        return self.loop.run_until_complete(step)

    @property
    def p(self) -> Platform:
        assert self.platform is not None
        return self.platform

    @initialize(
        seed=st.integers(min_value=0, max_value=2**32 - 1),
        jobs=st.lists(JOB_SHAPES, min_size=1, max_size=3),
    )
    def start(self, seed: int, jobs: list[tuple[int, int, str, bool]]) -> None:
        self.platform = self.run(open_platform(self.settings, random.Random(seed)))
        for shape in jobs:
            self._submit(*shape)

    # -- jobs and the API --------------------------------------------------------------------

    @precondition(lambda self: len(self.p.jobs) < MAX_JOBS)
    @rule(shape=JOB_SHAPES)
    def submit(self, shape: tuple[int, int, str, bool]) -> None:
        self._submit(*shape)

    def _submit(self, learners: int, max_restarts: int, scope: str, nudged: bool) -> None:
        manifest = {
            "learners": learners,
            "framework": {"command": "python train.py"},
            "restart_policy": {"max_restarts": max_restarts, "scope": scope, "backoff_s": 1},
        }

        async def create() -> str:
            async with self.p.ctx.sessions.begin() as session:
                job = await repo.create_job(
                    session,
                    owner_id=self.p.user.id,
                    name="model",
                    learners=learners,
                    manifest=manifest,
                )
            return job.id

        job_id = self.run(create())
        self.p.jobs[job_id] = JobModel(max_restarts)
        if nudged:
            self.p.queue.deploy(job_id)

    def _job(self, pick: int) -> str:
        return sorted(self.p.jobs)[pick % len(self.p.jobs)]

    async def _api(self, action: str, job_id: str) -> None:
        """A user's halt, resume or delete through the job services, as the route calls it."""
        if await user_asks(self.p.ctx, self.p.queue, self.p.user, action, job_id) is None:
            self.p.jobs[job_id].desired = "run" if action == "resume" else action

    async def _user_acts(self, action: str, pick: int) -> None:
        if action != "nothing" and self.p.jobs:
            await self._api(action, self._job(pick))

    # -- the lifecycle manager's processes ---------------------------------------------------

    async def _act(self, actor: str, pick: int) -> None:
        p = self.p
        if actor == "monitor":
            await p.monitor.step(block_ms=None)
        elif actor == "reconcile":
            await reconcile(p.ctx)
        elif actor == "task":
            await p.queue.run_one(p.ctx, pick)
        elif actor == "task lost":
            p.queue.lose(pick)
        elif actor.startswith("time passes"):
            p.clock.shift += timedelta(seconds=float(actor.split()[-1]))
        elif actor in ("cluster full", "cluster has room"):
            p.cluster.full = actor == "cluster full"
        elif actor in ("cluster up", "cluster down"):
            p.cluster.available = actor == "cluster up"
        else:
            await self._user_acts(USER_ACTIONS[pick % len(USER_ACTIONS)], pick)

    @rule(actors=st.lists(st.sampled_from(PLATFORM_ACTORS), min_size=1, max_size=4), pick=PICK)
    def the_platform_acts(self, actors: list[str], pick: int) -> None:
        """One after the other: the monitor, the reconcile, the worker, a user, the clock,
        the cluster's reachability and room."""
        for n, actor in enumerate(actors):
            self.run(self._act(actor, pick + n))

    @rule(
        actors=st.lists(
            st.sampled_from(["monitor", "reconcile", "task", "user"]), min_size=2, max_size=3
        ),
        pick=PICK,
    )
    def several_act_at_once(self, actors: list[str], pick: int) -> None:
        """Their awaits interleave, as separate processes' do."""

        async def together() -> None:
            await asyncio.gather(*(self._act(actor, pick + n) for n, actor in enumerate(actors)))

        self.run(together())

    # -- learners and their reports ----------------------------------------------------------

    @rule(
        moves=st.lists(
            st.tuples(PICK, st.sampled_from(LEARNER_HAPPENINGS), st.booleans()),
            min_size=1,
            max_size=3,
        )
    )
    def learners_move(self, moves: list[tuple[int, str, bool]]) -> None:
        """Running learners report progress, end (0 or not), are interrupted, vanish or
        hang (the heartbeat check finds one silent, as `check_heartbeats` would after its
        timeout, and fails it if its row still stands for it); the runner reports the end
        of its program, or dies with it and only the agent does."""
        cluster = self.p.cluster
        for pick, what, runner_reports in moves:
            live = sorted(cluster.live(), key=lambda learner: learner.name)
            if not live:
                return  # rules never depend on what a race left behind to be enabled
            learner = live[pick % len(live)]
            if what == "progress":
                cluster.progress(learner)
            elif what == "checkpoint":
                cluster.checkpoint(learner, f"ckpt-{pick:012d}")
            elif what == "interrupted":
                cluster.interrupt(learner)
            elif what.startswith("exit "):
                exit_code = int(what.removeprefix("exit "))
                self._count_failure(learner, exit_code != 0)
                cluster.end(learner, exit_code, runner_reports=runner_reports)
            elif what == "vanish":
                self._count_failure(learner)
                cluster.vanish(learner)
            else:
                self._count_failure(learner)
                silent, attempts = {learner.learner: 99.0}, {learner.learner: learner.attempt}
                self.run(apply_silence(self.p.ctx, learner.job_id, silent, attempts))

    def _count_failure(self, learner: SimulatedLearner, failed: bool = True) -> None:
        model = self.p.jobs.get(learner.job_id)
        if model is not None and failed:
            model.failures += 1

    @rule(pick=PICK)
    def a_stopped_learner_exits(self, pick: int) -> None:
        stopping = sorted(self.p.cluster.stopping(), key=lambda learner: learner.name)
        if not stopping:
            return
        learner = stopping[pick % len(stopping)]
        if learner.finished:
            self.p.cluster.learners.pop(learner.name, None)
        else:
            self.p.cluster.stop(learner)

    @rule(pick=PICK, copies=st.sampled_from([0, 1, 1, 1, 2]))
    def a_report_arrives(self, pick: int, copies: int) -> None:
        """A learner's next report arrives, once, twice or never."""
        heads = self.p.cluster.next_reports()
        if not heads:
            return
        report = self.p.cluster.deliver(heads[pick % len(heads)])
        for _ in range(copies):
            self.run(streams.apublish_learner_event(self.p.ctx.redis, report))

    # -- what must hold ----------------------------------------------------------------------

    @invariant()
    def every_job_has_one_chain_of_events(self) -> None:
        if self.platform is None:
            return
        for job_id, events in self.run(events_of_jobs(self.p.ctx, list(self.p.jobs))).items():
            assert not event_problems(events), (
                f"{event_problems(events)}; {job_id}:\n{story(events)}"
            )

    def teardown(self) -> None:
        if self.platform is None:
            self.loop.close()
            return
        try:
            self.run(self._settle())
            self.run(self._check_settled())
        finally:
            self.run(self.p.ctx.aclose())
            self.loop.close()

    async def _settle(self) -> None:
        """Nothing more goes wrong: the cluster answers, reports arrive, learners still
        running end with exit 0, stopped ones exit, and time passes; only the monitor, the
        reconcile and the queued tasks act, until every job is stopped and purged."""
        cluster = self.p.cluster
        cluster.available, cluster.full = True, False
        for _ in range(SETTLE_ROUNDS):
            for learner in list(cluster.live()):
                while learner.reported < 4:
                    cluster.progress(learner)
                cluster.end(learner, 0, runner_reports=True)
            for learner in list(cluster.stopping()):
                if learner.finished:
                    cluster.learners.pop(learner.name, None)
                else:
                    cluster.stop(learner)
            while cluster.outbox:
                await streams.apublish_learner_event(self.p.ctx.redis, cluster.deliver(0))
            self.p.clock.shift += timedelta(seconds=30)
            for _task in list(self.p.queue.tasks):
                await self.p.queue.run_one(self.p.ctx, 0)
            while await self.p.monitor.step(block_ms=None):
                pass
            await reconcile(self.p.ctx)
            if await self._all_settled():
                return
        states = {job_id: (await load_job(self.p.ctx, job_id)).state for job_id in self.p.jobs}
        raise AssertionError(f"jobs did not settle in {SETTLE_ROUNDS} rounds: {states}")

    async def _all_settled(self) -> bool:
        return await jobs_settled(self.p.ctx, self.p.jobs) and not self.p.cluster.learners

    async def _check_settled(self) -> None:
        for job_id, model in self.p.jobs.items():
            stored = await read_stored_job(self.p.ctx, job_id)
            job, events = stored.job, stored.events
            facts = stored.facts(model.max_restarts)
            told = f"job {job_id} ({model}):\n{story(events)}"
            problems = settled_problems(facts)
            assert not problems, f"{problems}; {told}"
            expected = _expected(model, events)
            assert job.state == expected, f"{job.state}, not {expected}; {told}"
            assert job.restarts <= model.failures, f"more restarts than failures; {told}"


def _expected(model: JobModel, events: list[EventFacts]) -> str:
    if model.desired == "delete":
        return JobState.DELETED
    if model.desired == "halt":
        return JobState.HALTED
    refused = any(event.kind == "restart_refused" for event in events)
    return JobState.FAILED if model.failures and refused else JobState.COMPLETED


def test_every_job_reaches_the_state_its_learners_and_its_user_dictate(
    tmp_path: Path, database_url: str, redis_url: str
) -> None:
    lm_settings = Settings(
        home=tmp_path / "home",
        database_url=database_url,
        redis_url=redis_url,
        objects_dir=tmp_path / "objects",
    )
    run_state_machine_as_test(
        lambda: Convergence(lm_settings),
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=60,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
