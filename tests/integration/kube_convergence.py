"""The model that `test_kubernetes_convergence` runs: every job on the Kubernetes backend
settles as its pods and its user dictate, whatever the interleaving.

Hypothesis drives, in generated orders, everything that acts on learner pods and jobs: the
test kubelet in manual mode, moving pods to Running, Succeeded or Failed (exit codes,
OOMKilled) or deleting them before they end; the pod watcher (the real list-and-watch
thread and `PodTracker`), whose events reach the Redis stream late, overtaken, twice or
never; the monitor (a batch of events); the reconcile; the worker's tasks (deploy, recover,
and the halts, resumes and deletes the API nudges; any may be lost); the API's halt, resume
and delete; and several of these at once, each a short script, their awaits interleaved,
one of them perhaps held on its calls to the cluster until the others acted (so that it
acts on what is no longer so). The watcher may restart, losing what it held. Time passes by
the injected clock.

After each step the test waits until the watcher has seen every pod as the API server holds
it (uid and resourceVersion), so what the watcher says follows from the steps, not from
thread timing; every job's events must still form one chain, and no halt its user took
back may halt an attempt deployed since. After each run the platform
settles: the pods its jobs still want end as the run chose for each job, the watcher's
held-back events arrive (lost ones stay lost), and only the monitor and the reconcile act.
Then every job must be DELETED if deleted, HALTED if halted, else COMPLETED when the pods of
its last attempt all exited 0, or FAILED on a failure its restart policy refused
(`tests.job_invariants`, with the policy); every restart and every recorded exit must be one
a pod really made; nothing of a settled job may be left in the cluster (but the Secret and
Service a HALTED job keeps for its resume).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, TypeVar

from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)
from kubernetes.client.exceptions import ApiException

from api.auth import Principal
from lifecycle_manager.backends.base import LearnerSpec, LearnerStatus, learner_name
from lifecycle_manager.backends.kubernetes.backend import KubernetesBackend
from lifecycle_manager.backends.kubernetes.client import NOT_FOUND, Caller
from lifecycle_manager.backends.kubernetes.manifests import root_name
from lifecycle_manager.backends.kubernetes.pod_events import (
    DELETED,
    JobNotice,
    Output,
    PodTracker,
)
from lifecycle_manager.backends.kubernetes.pod_watcher import Forwarder, deliver_one, start_watch
from lifecycle_manager.backends.kubernetes.watch import PodWatch
from lifecycle_manager.decisions.restart_policy import Cause, Failure, RestartPolicy, RestartScope
from lifecycle_manager.entrypoints.monitor import CONSUMER_GROUP, Monitor
from lifecycle_manager.entrypoints.wiring import open_context
from lifecycle_manager.glue.context import Context, no_pass
from lifecycle_manager.glue.reconcile import reconcile
from storage import streams
from storage.job_states import JobState
from storage.settings import Settings
from tests import services
from tests.integration import kube_harness
from tests.integration.convergence import (
    ShiftedClock,
    TaskKind,
    TaskQueue,
    job_events,
    jobs_settled,
    read_stored_job,
    user_asks,
)
from tests.integration.kube_harness import (
    load,
    make_job,
    pods_of,
)
from tests.job_invariants import EventFacts, event_problems, settled_problems
from tests.kube.emulator import RunningEmulator
from tests.kube.kubelet import Kubelet

T = TypeVar("T")

SETTLE_ROUNDS = 40
# A halt or delete racing a deploy waits this long for the new pods to go, then retries.
TIMINGS = replace(kube_harness.TIMINGS, stop_wait_s=0.5)
CATCH_UP_S = 60.0  # only a watcher that lost an event takes this long
PICK = st.integers(min_value=0, max_value=1_000_000)


# -- what a step may do ------------------------------------------------------------------------


@dataclass(frozen=True)
class Reconcile:
    pass


@dataclass(frozen=True)
class MonitorBatch:
    pass


@dataclass(frozen=True)
class RunTask:
    """The worker runs a queued task: a nudge, a scheduled recovery or a retry."""

    pick: int


@dataclass(frozen=True)
class TaskLost:
    """A queued task is lost (the worker died with it, the broker dropped it)."""

    pick: int


@dataclass(frozen=True)
class TimePasses:
    seconds: float


@dataclass(frozen=True)
class UserAsks:
    action: str  # halt, resume or delete, through the API's job services
    pick: int


@dataclass(frozen=True)
class PodStarts:
    pick: int


@dataclass(frozen=True)
class PodEnds:
    pick: int
    exit_code: int
    reason: str | None = None  # the container's reason, as the kubelet gives it


@dataclass(frozen=True)
class PodVanishes:
    """A pod is deleted before it ended (evicted, deleted by someone else)."""

    pick: int


PodMove = PodStarts | PodEnds | PodVanishes


@dataclass(frozen=True)
class Heard:
    """A pod moves and the platform hears of it at once, as it does when all is well: the
    watcher catches up and delivers all it holds, and the monitor handles a batch."""

    move: PodMove


@dataclass(frozen=True)
class ReportArrives:
    """The oldest event the watcher holds, or a later one overtaking it, reaches the stream
    `copies` times (0: lost)."""

    pick: int
    copies: int


@dataclass(frozen=True)
class WatcherDelivers:
    """The watcher catches up with the cluster and delivers all it holds, in order."""


@dataclass(frozen=True)
class WatcherRestarts:
    """The pod watcher goes down, losing what it held, and comes back once the step is over:
    it lists every pod again with a new tracker, repeating what it said of them, and says
    nothing of pods that went while it was down. (It lists when nothing else acts: the
    emulator's watch, unlike an API server's, may miss what changes between a list and the
    watch that follows it.)"""


@dataclass(frozen=True)
class Held:
    """An actor whose every call to the cluster is held until `others` more actions of the
    step are done (or nothing else can act): before it is sent (it acts on what it read
    before), or once it is answered (it acts on an answer no longer so), as with a slow API
    server or a descheduled process."""

    action: Reconcile | MonitorBatch | RunTask
    others: int
    before: bool


Action = (
    Held
    | Reconcile
    | MonitorBatch
    | RunTask
    | TaskLost
    | TimePasses
    | UserAsks
    | PodStarts
    | PodEnds
    | PodVanishes
    | Heard
    | ReportArrives
    | WatcherDelivers
    | WatcherRestarts
)

POD_MOVES: st.SearchStrategy[PodMove] = st.one_of(
    st.builds(PodStarts, PICK),
    st.builds(
        lambda pick, end: PodEnds(pick, *end),
        PICK,
        st.sampled_from(
            [(0, None), (0, None), (1, None), (3, None), (137, None), (137, "OOMKilled")]
        ),
    ),
    st.builds(PodVanishes, PICK),
)
HELD: st.SearchStrategy[Held] = st.builds(
    Held,
    st.one_of(st.just(Reconcile()), st.just(MonitorBatch()), st.builds(RunTask, PICK)),
    st.integers(min_value=1, max_value=3),
    st.booleans(),
)
# Held actors and promptly heard pods are drawn twice as often: most races need them.
ACTIONS: st.SearchStrategy[Action] = st.one_of(
    HELD,
    HELD,
    st.just(Reconcile()),
    st.just(MonitorBatch()),
    st.builds(RunTask, PICK),
    st.builds(TaskLost, PICK),
    st.builds(TimePasses, st.sampled_from([1.0, 6.0, 31.0])),
    st.builds(
        UserAsks, st.sampled_from(["halt", "halt", "halt", "resume", "resume", "delete"]), PICK
    ),
    POD_MOVES,
    st.builds(Heard, POD_MOVES),
    st.builds(Heard, POD_MOVES),
    st.builds(ReportArrives, PICK, st.sampled_from([0, 1, 1, 1, 2])),
    st.just(WatcherDelivers()),
    st.just(WatcherRestarts()),
)


@dataclass(frozen=True)
class JobSpec:
    learners: int
    restart_policy: Mapping[str, Any] | None  # the manifest's block (None: the defaults)
    exit_code: int  # how its pods end once the run is over
    nudged: bool  # its deploy task is queued (else only the reconcile deploys it)


JOB_SPECS = st.builds(
    JobSpec,
    learners=st.integers(min_value=1, max_value=3),
    restart_policy=st.one_of(
        st.none(),
        st.fixed_dictionaries(
            {
                "max_restarts": st.integers(min_value=0, max_value=2),
                "scope": st.sampled_from(["gang", "learner"]),
            }
        ),
    ),
    exit_code=st.sampled_from([0, 0, 1, 137]),
    nudged=st.booleans(),
)


# -- the platform under test -------------------------------------------------------------------


class Turns:
    """The actions done so far in a step, for an actor held until others acted."""

    def __init__(self, scripts: int) -> None:
        self.done = 0
        self.free = scripts  # scripts neither held nor finished
        self.changed = asyncio.Condition()

    async def action_done(self) -> None:
        async with self.changed:
            self.done += 1
            self.changed.notify_all()

    async def script_done(self) -> None:
        async with self.changed:
            self.free -= 1
            self.changed.notify_all()

    async def others_act(self, count: int) -> None:
        async with self.changed:
            target = self.done + count
            self.free -= 1
            self.changed.notify_all()
            try:
                await self.changed.wait_for(lambda: self.done >= target or self.free <= 0)
            finally:
                self.free += 1


# How the actor running in this task is held, if it is (see `Held`): its hold, and whether
# before its calls to the cluster.
HOLD: ContextVar[tuple[Callable[[], Awaitable[None]], bool] | None] = ContextVar(
    "hold", default=None
)


async def held(before: bool) -> None:
    hold = HOLD.get()
    if hold is not None and hold[1] == before:
        await hold[0]()


class HeldAnswers(KubernetesBackend):
    """The Kubernetes backend, holding a held actor's calls."""

    async def create_learners(self, specs: Sequence[LearnerSpec]) -> list[str]:
        await held(before=True)
        created = await super().create_learners(specs)
        await held(before=False)
        return created

    async def delete_learners(
        self,
        job_id: str,
        *,
        wait: float = 0.0,
        grace: float | None = None,
        up_to_attempt: int | None = None,
    ) -> bool:
        await held(before=True)
        gone = await super().delete_learners(
            job_id, wait=wait, grace=grace, up_to_attempt=up_to_attempt
        )
        await held(before=False)
        return gone

    async def delete_learner_of(
        self,
        job_id: str,
        learner: int,
        *,
        wait: float = 0.0,
        grace: float | None = None,
        up_to_attempt: int | None = None,
    ) -> bool:
        await held(before=True)
        gone = await super().delete_learner_of(
            job_id, learner, wait=wait, grace=grace, up_to_attempt=up_to_attempt
        )
        await held(before=False)
        return gone

    async def delete_learner(self, name: str) -> None:
        await held(before=True)
        await super().delete_learner(name)
        await held(before=False)

    async def list_learners(self) -> list[LearnerStatus]:
        await held(before=True)
        listed = await super().list_learners()
        await held(before=False)
        return listed


def pod_version(pod: Mapping[str, Any]) -> tuple[str, tuple[str, str]]:
    meta = pod.get("metadata") or {}
    return str(meta.get("name")), (str(meta.get("uid")), str(meta.get("resourceVersion")))


class HeldForwarder(Forwarder):
    """The pod watcher's forwarder, holding what the tracker says for the test to deliver,
    and keeping which version of each pod it has been shown, so that the test can wait
    until the watcher has seen the cluster as it is."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(PodTracker(), loop, asyncio.Queue())
        self.seen: dict[str, tuple[str, str]] = {}
        self.changed = asyncio.Event()
        self._handing = threading.Lock()
        self._closed = False

    def pod_event(self, kind: str, pod: Mapping[str, Any]) -> None:
        with self._handing:
            if not self._closed:
                super().pod_event(kind, pod)
                self.loop.call_soon_threadsafe(self._saw, kind, pod_version(pod))

    def relisted(self, pods: list[Mapping[str, Any]]) -> None:
        with self._handing:
            if not self._closed:
                super().relisted(pods)
                self.loop.call_soon_threadsafe(self._listed, [pod_version(pod) for pod in pods])

    def close(self) -> None:
        """Hand nothing more to the event loop; called on it."""
        with self._handing:
            self._closed = True
        self.changed.set()

    # On the event loop, after the outputs of the same pod were queued.
    def _saw(self, kind: str, version: tuple[str, tuple[str, str]]) -> None:
        name, stamp = version
        if kind == DELETED:
            self.seen.pop(name, None)
        else:
            self.seen[name] = stamp
        self.changed.set()

    def _listed(self, versions: list[tuple[str, tuple[str, str]]]) -> None:
        self.seen = dict(versions)
        self.changed.set()

    async def caught_up(self, cluster: Callable[[], list[dict[str, Any]]]) -> None:
        """Wait until the watcher has been shown every pod as `cluster()` lists them (or is
        stopped)."""
        deadline = time.monotonic() + CATCH_UP_S
        while not self._closed:
            self.changed.clear()
            pods = dict(pod_version(pod) for pod in await asyncio.to_thread(cluster))
            if self.seen == pods:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"the pod watcher saw {self.seen}, the cluster holds {pods}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), left)

    def said(self) -> list[Output]:
        """What the tracker said since the last call."""
        outputs = []
        while not self.queue.empty():
            outputs.append(self.queue.get_nowait())
        return outputs


@dataclass
class JobModel:
    """What the test did to a job, from which its final state follows."""

    user: Principal
    policy: RestartPolicy
    exit_code: int  # how its pods end once the run is over
    desired: str = "run"  # as the API last accepted: run, halt or delete


class PodWatcher:
    """The pod watcher's watch thread and tracker
    (`python -m lifecycle_manager.backends.kubernetes.pod_watcher`), in this event loop; what
    it says is held for the test to deliver."""

    def __init__(self, settings_: Settings) -> None:
        url = settings_.kube_api_url
        assert url is not None
        self.calls = Caller(kube_harness.core_api(url).api_client, timeout=2.0)
        self.forwarder = HeldForwarder(asyncio.get_running_loop())
        self.stop_watching = threading.Event()
        watch = PodWatch(self.calls, settings_.kube_namespace)
        start_watch(watch, self.forwarder, self.stop_watching)

    def stop(self) -> None:
        """The watch thread ends at its next event; it hands nothing more over."""
        self.stop_watching.set()
        self.forwarder.close()
        self.calls.close()


@dataclass
class Platform:
    ctx: Context
    queue: TaskQueue
    clock: ShiftedClock
    monitor: Monitor
    watcher: PodWatcher | None  # None while it is down
    jobs: dict[str, JobModel] = field(default_factory=dict)
    # How the test ended each pod: its exit code, or None for deleted before it ended.
    # A pod created again under its name (a deploy run again) ends again.
    ends: dict[str, list[int | None]] = field(default_factory=dict)
    held: list[Output] = field(default_factory=list)  # the watcher's events not delivered yet
    # One kubelet action at a time, on a pod's phase as it stands (a real kubelet never
    # moves a pod out of Succeeded or Failed); one API request at a time, so that the model
    # records them in the order they took effect.
    kubelet_turn: asyncio.Lock = field(default_factory=asyncio.Lock)
    api_turn: asyncio.Lock = field(default_factory=asyncio.Lock)
    trail: list[str] = field(default_factory=list)  # what happened, for a failure's report


async def open_platform(settings_: Settings) -> Platform:
    ctx = open_context(settings_, TIMINGS)
    ctx.request_pass = no_pass  # no worker takes tasks here: the test runs passes
    await ctx.backend.aclose()
    ctx.backend = HeldAnswers.from_settings(settings_)
    queue = TaskQueue()
    clock = ShiftedClock()

    async def schedule_recovery(job_id: str, delay_s: float) -> None:
        queue.send(TaskKind.RECOVER, job_id)

    ctx.schedule_recovery = schedule_recovery
    ctx.clock = clock
    await streams.aensure_learner_group(ctx.redis, CONSUMER_GROUP)
    monitor = Monitor(ctx, services.unique_name("kube-model-monitor"))
    await monitor.step(block_ms=None)  # its first step reads its own backlog, empty
    return Platform(ctx, queue, clock, monitor, PodWatcher(settings_))


async def close_platform(platform: Platform) -> None:
    if platform.watcher is not None:
        platform.watcher.stop()
    await platform.ctx.aclose()


class KubeConvergence(RuleBasedStateMachine):
    """One run: a few jobs on the emulator and a generated story of what happens to them."""

    def __init__(self, settings_: Settings, emulator: RunningEmulator, kubelet: Kubelet) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.settings = settings_
        self.emulator = emulator
        self.kubelet = kubelet
        self.platform: Platform | None = None

    def run(self, step: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(step)

    @property
    def p(self) -> Platform:
        assert self.platform is not None
        return self.platform

    @initialize(jobs=st.lists(JOB_SPECS, min_size=1, max_size=3))
    def start(self, jobs: list[JobSpec]) -> None:
        self.platform = self.run(open_platform(self.settings))
        for spec in jobs:
            self.run(self._submit(spec))
        self.run(self._collect())

    async def _submit(self, spec: JobSpec) -> None:
        manifest: dict[str, Any] = {}
        if spec.restart_policy is not None:
            manifest["restart_policy"] = dict(spec.restart_policy)
        job_id = await make_job(self.p.ctx, "python train.py", spec.learners, **manifest)
        owner = (await load(self.p.ctx, job_id)).owner_id
        self.p.jobs[job_id] = JobModel(
            Principal(owner, "kube-model", is_admin=False),
            RestartPolicy.from_manifest(manifest),
            spec.exit_code,
        )
        if spec.nudged:
            self.p.queue.deploy(job_id)

    # -- steps ---------------------------------------------------------------------------------

    # Which steps run depends on nothing the platform did (no preconditions): Hypothesis must
    # draw the same steps when it runs a story again, whatever the interleaving was; a step
    # with nothing to act on does nothing.
    @rule(action=ACTIONS)
    def one_acts(self, action: Action) -> None:
        self.p.trail.append(f"alone: {action}")
        self.run(self._step(self._perform(action, Turns(1))))

    @rule(scripts=st.lists(st.lists(ACTIONS, min_size=1, max_size=4), min_size=2, max_size=3))
    def several_act_at_once(self, scripts: list[list[Action]]) -> None:
        self.p.trail.append(f"together: {scripts}")

        turns = Turns(len(scripts))

        async def play(script: list[Action]) -> None:
            for action in script:
                await self._perform(action, turns)
                await turns.action_done()
            await turns.script_done()

        async def together() -> None:
            await asyncio.gather(*(play(script) for script in scripts))

        self.run(self._step(together()))

    @rule(held=HELD, script=st.lists(ACTIONS, min_size=1, max_size=4))
    def a_held_actor_acts_on_what_others_change(self, held: Held, script: list[Action]) -> None:
        """The races most stories need, drawn more often than `several_act_at_once` would."""
        self.several_act_at_once([[held], script])

    async def _step(self, acting: Awaitable[None]) -> None:
        await acting
        if self.p.watcher is None:
            self.p.watcher = PodWatcher(self.settings)
            self.p.trail.append("the watcher is back")
        await self._collect()

    async def _perform(self, action: Action, turns: Turns) -> None:
        p = self.p
        match action:
            case Held(acting, others, before):
                p.trail.append(f"held until {others} others acted: {acting}")
                hold = HOLD.set((functools.partial(turns.others_act, others), before))
                try:
                    await self._perform(acting, turns)
                finally:
                    HOLD.reset(hold)
            case Reconcile():
                p.trail.append(f"reconcile: {await reconcile(p.ctx)}")
            case MonitorBatch():
                p.trail.append(f"monitor handled {await p.monitor.step(block_ms=None)} events")
            case RunTask(pick):
                await self._run_task(pick)
            case TaskLost(pick):
                if (task := p.queue.lose(pick)) is not None:
                    p.trail.append(f"lost: task {task.kind} {task.job_id}")
            case TimePasses(seconds):
                p.clock.shift += timedelta(seconds=seconds)
                p.trail.append(f"{seconds} s pass")
            case UserAsks(request, pick):
                await self._user_asks(request, sorted(p.jobs)[pick % len(p.jobs)])
            case PodStarts(pick) | PodEnds(pick) | PodVanishes(pick):
                await self._kubelet_acts(action, pick)
            case Heard(move):
                await self._kubelet_acts(move, move.pick)
                await self._collect()
                await self._deliver_held()
                p.trail.append(f"monitor handled {await p.monitor.step(block_ms=None)} events")
            case ReportArrives(pick, copies):
                if p.held:
                    output = p.held.pop(pick % len(p.held) if pick % 3 == 0 else 0)
                    p.trail.append(f"delivered x{copies}: {describe(output)}")
                    for _ in range(copies):
                        await deliver_one(output, p.ctx.redis, p.ctx.sessions)
            case WatcherDelivers():
                await self._collect()
                await self._deliver_held()
            case WatcherRestarts():
                if p.watcher is not None:
                    p.watcher.stop()
                    p.watcher = None
                    p.trail += [f"lost with the watcher: {describe(e)}" for e in p.held]
                    p.held.clear()

    async def _run_task(self, pick: int) -> None:
        happened = await self.p.queue.run_one(self.p.ctx, pick)
        if happened is not None:
            self.p.trail.append(happened)

    async def _user_asks(self, request: str, job_id: str) -> None:
        """A user's halt, resume or delete through the job services, as the route calls it."""
        model = self.p.jobs[job_id]
        async with self.p.api_turn:
            refusal = await user_asks(self.p.ctx, self.p.queue, model.user, request, job_id)
            if refusal is not None:  # finished, not halted, deleted: nothing changes
                self.p.trail.append(f"user asks {request} {job_id}: refused, {refusal}")
                return
            model.desired = "run" if request == "resume" else request
            self.p.trail.append(f"user asks {request} {job_id}: accepted")

    def _pods(self) -> list[dict[str, Any]]:
        """The pods of this run's jobs, by name."""
        found = []
        for job_id in sorted(self.p.jobs):
            found += pods_of(self.emulator, self.settings.kube_namespace, job_id)
        return found

    def _cluster(self) -> list[dict[str, Any]]:
        """Every pod in the namespace (the watcher's view includes pods of earlier runs)."""
        return self.emulator.objects("pods", self.settings.kube_namespace)

    async def _kubelet_acts(self, action: PodMove, pick: int) -> None:
        async with self.p.kubelet_turn:
            going = [
                pod
                for pod in await asyncio.to_thread(self._pods)
                if pod["status"].get("phase") in ("Pending", "Running")
            ]
            if not going:
                return
            pod = going[pick % len(going)]
            try:
                await self._move(pod, action)
            except ApiException as error:
                if error.status != NOT_FOUND:
                    raise  # else the lifecycle manager deleted it meanwhile

    async def _move(self, pod: dict[str, Any], action: PodMove) -> None:
        name = pod["metadata"]["name"]
        kubelet = self.kubelet
        match action:
            case PodStarts():
                if pod["status"].get("phase") == "Pending":
                    await asyncio.to_thread(kubelet.start, name)
                    self.p.trail.append(f"kubelet: {name} runs")
            case PodEnds(_pick, exit_code, reason):
                await asyncio.to_thread(kubelet.finish, name, exit_code, reason)
                self.p.ends.setdefault(name, []).append(exit_code)
                self.p.trail.append(f"kubelet: {name} exits {exit_code} {reason or ''}")
            case PodVanishes():
                await asyncio.to_thread(
                    kubelet.core.delete_namespaced_pod,
                    name,
                    self.settings.kube_namespace,
                    grace_period_seconds=0,
                )
                self.p.ends.setdefault(name, []).append(None)
                self.p.trail.append(f"kubelet: {name} deleted before it ended")

    async def _collect(self) -> None:
        """Wait until the watcher has seen the cluster as it is; hold what it said."""
        watcher = self.p.watcher
        if watcher is None:
            return  # down: it sees nothing
        await watcher.forwarder.caught_up(self._cluster)
        if watcher is not self.p.watcher:
            return  # it went down meanwhile, with what it had to say
        said = watcher.forwarder.said()
        self.p.trail += [f"watcher said: {describe(output)}" for output in said]
        self.p.held += said

    async def _deliver_held(self) -> None:
        while self.p.held:
            output = self.p.held.pop(0)
            self.p.trail.append(f"delivered: {describe(output)}")
            await deliver_one(output, self.p.ctx.redis, self.p.ctx.sessions)

    # -- what must hold ----------------------------------------------------------------------

    @invariant()
    def every_job_has_one_chain_of_events(self) -> None:
        if self.platform is None:
            return
        for job_id in self.p.jobs:
            events = self.run(job_events(self.p.ctx, job_id))
            problems = event_problems(events)
            assert not problems, self._report(job_id, problems, events)

    def teardown(self) -> None:
        if self.platform is None:
            self.loop.close()
            return
        try:
            self.run(self._settle())
            self.run(self._check_settled())
        finally:
            self.run(close_platform(self.p))
            self.loop.close()

    async def _settle(self) -> None:
        """Nothing more goes wrong: pods still wanted end as the run chose, the events the
        watcher holds arrive (lost ones stay lost), time passes, and only the monitor and the
        reconcile act (queued tasks are lost), until every job is stopped and cleaned up."""
        p = self.p
        for _ in range(SETTLE_ROUNDS):
            p.trail.append("settling")
            p.queue.tasks.clear()
            p.clock.shift += timedelta(seconds=31)  # past every grace and backoff
            await self._end_wanted_pods()
            for act in (self._monitor_all, self._reconcile_once):
                await self._collect()
                await self._deliver_held()
                await act()
            await self._collect()
            await self._deliver_held()
            await self._monitor_all()
            if await self._all_settled():
                return
        states = {job_id: (await load(p.ctx, job_id)).state for job_id in p.jobs}
        raise AssertionError(f"jobs did not settle in {SETTLE_ROUNDS} rounds: {states}")

    async def _monitor_all(self) -> None:
        while await self.p.monitor.step(block_ms=None):
            pass

    async def _reconcile_once(self) -> None:
        await reconcile(self.p.ctx)

    async def _end_wanted_pods(self) -> None:
        for pod in await asyncio.to_thread(self._pods):
            job_id = pod["metadata"]["labels"]["dlaas.io/job"]
            model = self.p.jobs[job_id]
            if model.desired != "run":
                continue
            phase = pod["status"].get("phase")
            if phase not in ("Pending", "Running"):
                continue
            async with self.p.kubelet_turn:
                try:
                    if phase == "Pending":
                        await self._move(pod, PodStarts(0))
                    await self._move(pod, PodEnds(0, model.exit_code))
                except ApiException as error:
                    if error.status != NOT_FOUND:
                        raise

    async def _all_settled(self) -> bool:
        if self.p.held:
            return False
        if await asyncio.to_thread(self._pods):
            return False
        return await jobs_settled(self.p.ctx, self.p.jobs)

    async def _check_settled(self) -> None:
        for job_id, model in self.p.jobs.items():
            stored = await read_stored_job(self.p.ctx, job_id)
            job, rows, events = stored.job, stored.learners, stored.events
            facts = stored.facts(model.policy.max_restarts, model.policy)
            problems = settled_problems(facts)
            attempts = {row.index: row.attempt for row in rows}
            problems += self._state_problems(job_id, model, job.state, attempts, events)
            problems += self._failure_problems(job_id, model, events)
            problems += await asyncio.to_thread(self._leftovers, job_id, job.state)
            assert not problems, self._report(job_id, problems, events)

    def _state_problems(
        self,
        job_id: str,
        model: JobModel,
        state: str,
        attempts: Mapping[int, int],
        events: Sequence[EventFacts],
    ) -> list[str]:
        """The state its user and its pods dictate."""
        if model.desired == "delete":
            return [] if state == JobState.DELETED else [f"deleted, but {state}"]
        if model.desired == "halt":
            return [] if state == JobState.HALTED else [f"halted, but {state}"]
        if state == JobState.COMPLETED:
            ends = {
                index: self._ends(learner_name(job_id, index, attempt))
                for index, attempt in attempts.items()
            }
            if not all(0 in pod_ends for pod_ends in ends.values()):
                return [f"COMPLETED, but its last attempt's pods ended {ends}"]
            return []
        if state == JobState.FAILED:
            verdicts = [e.kind for e in events if e.kind in ("restart", "restart_refused")]
            if not verdicts or verdicts[-1] != "restart_refused":
                return [f"FAILED with no failure its policy refused: {verdicts}"]
            return []
        return [f"left {state}"]

    def _failure_problems(
        self, job_id: str, model: JobModel, events: Sequence[EventFacts]
    ) -> list[str]:
        """Failures and exits the job recorded that no pod made."""
        problems = []
        for number, event in enumerate(events):
            if event.kind in ("restart", "restart_refused"):
                failure = Failure.from_detail(event.detail["failure"])
                attempt = int(event.detail["attempt"])
                if model.policy.scope is RestartScope.GANG:
                    tried = [attempt]
                else:  # the failed learner may have been created in an earlier attempt
                    tried = list(range(1, attempt + 1))
                ends = {
                    end
                    for a in tried
                    for end in self._ends(learner_name(job_id, failure.learner, a))
                }
                if failure.cause is Cause.VANISHED:
                    made = None in ends
                elif failure.cause in (Cause.EXIT, Cause.SIGNAL, Cause.OOM):
                    made = failure.exit_code not in (None, 0) and failure.exit_code in ends
                else:
                    made = False  # no heartbeats nor interruptions here
                if not made:
                    problems.append(
                        f"event {number}: {event.kind} on learner {failure.learner}'s "
                        f"{failure.cause} failure (exit {failure.exit_code}) in attempt "
                        f"{attempt}, but no pod of it ended so"
                    )
            elif event.kind == "learner_exit" and event.detail.get("exit_code") is not None:
                name = learner_name(job_id, event.detail["learner"], event.detail["attempt"])
                if event.detail["exit_code"] not in self._ends(name):
                    problems.append(
                        f"event {number}: {name} exited {event.detail['exit_code']}, but the "
                        f"pod ended {self._ends(name)}"
                    )
        return problems

    def _ends(self, pod: str) -> list[int | None]:
        return self.p.ends.get(pod, [])

    def _report(self, job_id: str, problems: list[str], events: Sequence[EventFacts]) -> str:
        """A failure's story: the job, its events, how its pods ended, and what happened."""
        others = [other for other in self.p.jobs if other != job_id]
        trail = [
            line
            for line in self.p.trail
            if job_id in line or not any(other in line for other in others)
        ]
        ends = {name: end for name, end in self.p.ends.items() if job_id in name}
        lines = [
            f"job {job_id}: {self.p.jobs[job_id]}",
            *(f"  problem: {problem}" for problem in problems),
            f"  its pods ended: {ends}",
            "  its events:",
            *(f"    {number}: {e}" for number, e in enumerate(events)),
            "  what happened (to other jobs left out):",
            *(f"    {line}" for line in trail),
        ]
        return "\n".join(lines)

    def _leftovers(self, job_id: str, state: str) -> list[str]:
        """Anything of a settled job still in the cluster: no pod, and for a job done with
        (a HALTED one keeps its Secret and Service for its resume), nothing at all."""
        namespace = self.settings.kube_namespace
        left = [pod["metadata"]["name"] for pod in pods_of(self.emulator, namespace, job_id)]
        for plural in ("secrets", "services") if state != JobState.HALTED else ():
            left += [
                f"{plural}/{obj['metadata']['name']}"
                for obj in self.emulator.objects(plural, namespace)
                if obj["metadata"]["name"] == root_name(job_id)
            ]
        return [f"left in the cluster: {left}"] if left else []


def describe(output: Output) -> str:
    if isinstance(output, JobNotice):
        return f"notice on {output.pod}: {output.notice.code}"
    fields = {k: v for k, v in output.fields.items() if k in ("state", "exit_code", "reason")}
    return f"{output.kind} of {learner_name(output.job, output.learner, output.attempt)} {fields}"
