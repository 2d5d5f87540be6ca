"""The pod watcher: what Kubernetes says of learner pods, fed to the health monitor.

    python -m lifecycle_manager.backends.kubernetes.pod_watcher

Lists, then watches, dlaas's learner pods in `DLAAS_KUBE_NAMESPACE` (re-listing when its
resourceVersion expires) and publishes what changed on the `dlaas:learner-events` stream,
the same stream the node agent and the runners write and the monitor reads: a learner
container that started (`status` DOWNLOADING), a pod that finished or vanished (`exit`, with
the exit code and the cluster's reason, `source=kubernetes`). Cluster happenings a user
should see (FailedScheduling, ImagePullBackOff, ...) become job events of kind `cluster`.
Run one per namespace; a second one only repeats events, which the monitor ignores. While
its watch thread and its delivery run, it refreshes `DLAAS_LIVENESS_FILE` (if set) for a
liveness probe. Environment: the `DLAAS_*` settings (database, Redis, `DLAAS_KUBE_*`).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import redis.asyncio as aioredis
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from lifecycle_manager.backends.kubernetes.client import Caller, api_client
from lifecycle_manager.backends.kubernetes.pod_events import JobNotice, Output, PodTracker
from lifecycle_manager.backends.kubernetes.watch import PodWatch
from lifecycle_manager.liveness import Heartbeat, keep_beating
from storage import jobs as repo
from storage import streams
from storage.db import make_engine, make_sessionmaker
from storage.migrate import upgrade
from storage.settings import Settings

log = logging.getLogger("dlaas.pod_watcher")

NOTICE_EVENT = "cluster"


class Forwarder:
    """Receives pods from the watch thread; hands what is new to the event loop."""

    def __init__(
        self, tracker: PodTracker, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[Output]
    ) -> None:
        self.tracker = tracker
        self.loop = loop
        self.queue = queue

    def pod_event(self, kind: str, pod: Mapping[str, Any]) -> None:
        self._hand_over(self.tracker.seen(kind, pod))

    def relisted(self, pods: list[Mapping[str, Any]]) -> None:
        self._hand_over(self.tracker.relisted(pods))

    def _hand_over(self, outputs: Iterable[Output]) -> None:
        for output in outputs:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, output)


async def record_notice(sessions: async_sessionmaker[AsyncSession], notice: JobNotice) -> bool:
    """Add the notice to the job's events unless the same one is there; whether it was added."""
    reason = f"learner {notice.learner}: {notice.notice.message}"
    async with sessions.begin() as session:
        if await repo.get_job_any(session, notice.job) is None:
            return False
        for event in await repo.list_events(session, notice.job):
            if event.kind == NOTICE_EVENT and event.reason == reason:
                return False
        detail = {
            "learner": notice.learner,
            "attempt": notice.attempt,
            "pod": notice.pod,
            "code": notice.notice.code,
        }
        await repo.add_event(session, notice.job, NOTICE_EVENT, reason, detail)
    return True


async def deliver_one(
    output: Output, redis: aioredis.Redis, sessions: async_sessionmaker[AsyncSession]
) -> None:
    """Publish a learner event on the stream, or record a notice in its job's events."""
    if isinstance(output, JobNotice):
        await record_notice(sessions, output)
    else:
        await streams.apublish_learner_event(redis, output)


async def deliver(
    queue: asyncio.Queue[Output],
    redis: aioredis.Redis,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Publish learner events and record notices as they come, for ever."""
    while True:
        output = await queue.get()
        while True:
            try:
                await deliver_one(output, redis, sessions)
                break
            except Exception:
                log.exception("pod watcher: could not deliver %s; retrying", output)
                await asyncio.sleep(1.0)


def start_watch(watcher: PodWatch, forwarder: Forwarder, stop: threading.Event) -> threading.Thread:
    thread = threading.Thread(
        target=watcher.run, args=(forwarder, stop), name="pod-watch", daemon=True
    )
    thread.start()
    return thread


async def serve(settings: Settings) -> None:
    engine = make_engine(settings.database_url, pool_size=2)
    redis = aioredis.Redis.from_url(settings.redis_url)
    calls = Caller(api_client(settings), timeout=settings.kube_request_timeout_s)
    watcher = PodWatch(calls, settings.kube_namespace)
    queue: asyncio.Queue[Output] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    tracker = PodTracker(settings.kube_image_pull_timeout_s)
    stop = threading.Event()
    done = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)
    thread = start_watch(watcher, Forwarder(tracker, loop, queue), stop)
    delivery = asyncio.create_task(deliver(queue, redis, make_sessionmaker(engine)))
    alive = asyncio.create_task(
        keep_beating(
            Heartbeat(settings.liveness_file), lambda: thread.is_alive() and not delivery.done()
        )
    )
    log.info("watching learner pods in namespace %s", settings.kube_namespace)
    try:
        await done.wait()
    finally:
        stop.set()
        alive.cancel()
        delivery.cancel()
        await redis.aclose()
        await engine.dispose()
        calls.close()


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = Settings()
    upgrade(settings.database_url)
    asyncio.run(serve(settings))


if __name__ == "__main__":
    main()
