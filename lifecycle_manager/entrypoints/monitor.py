"""The health monitor: applies learner events to jobs as they arrive, and fails learners
whose heartbeats stopped (hung) so the restart policy can restart them. It also relays each
job's events from the job's own stream into the shared one (`event_relay`) and keeps Redis's
job users in line with the database every second (`job_users`).

    python -m lifecycle_manager.entrypoints.monitor [--consumer NAME]

Reads the stream `dlaas:learner-events` in the consumer group `lifecycle` and acknowledges
an event only after its database write committed, so a crash redelivers it (handling is
idempotent). On start it first re-reads what it had been given but not acknowledged, and it
claims events another consumer left unacknowledged for a while. Told to stop (SIGTERM), it
first handles the events already in the stream, for up to a few seconds. Every pass of its
loop refreshes `DLAAS_LIVENESS_FILE` (if set) for a liveness probe. Environment: the `DLAAS_*`
settings (database, Redis, cluster backend).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import socket
import time
from collections import Counter

from redis.exceptions import RedisError

from lifecycle_manager.backends.base import BackendUnavailable
from lifecycle_manager.entrypoints.wiring import open_context
from lifecycle_manager.glue import job_users, scheduling
from lifecycle_manager.glue.context import Context
from lifecycle_manager.glue.event_relay import EventRelay
from lifecycle_manager.glue.heartbeats import check_heartbeats
from lifecycle_manager.glue.learner_reports import Settled, apply_learner_events
from lifecycle_manager.liveness import Heartbeat
from storage import streams
from storage.migrate import upgrade
from storage.settings import Settings

log = logging.getLogger("dlaas.monitor")

CONSUMER_GROUP = "lifecycle"
BATCH = 100
BLOCK_MS = 1000
CLAIM_IDLE_MS = 30_000
CLAIM_EVERY_S = 10.0
HEARTBEAT_CHECK_EVERY_S = 1.0
JOB_USERS_EVERY_S = 1.0
MAX_FAILURES = 5  # an event that fails this often is logged and dropped
FAILURE_PAUSE_S = 0.5  # after a step in which an event failed, before the next
DRAIN_ON_STOP_S = 5.0
DRAIN_BLOCK_MS = 100

Entries = list[tuple[streams.StreamId, streams.LearnerEvent]]


class Monitor:
    def __init__(self, ctx: Context, consumer: str, heartbeat: Heartbeat | None = None) -> None:
        self.ctx = ctx
        self.consumer = consumer
        self.heartbeat = heartbeat or Heartbeat(ctx.settings.liveness_file)
        self.relay = EventRelay(ctx.redis)
        self.failures: Counter[str] = Counter()
        self._backlog = True  # re-read our own unacknowledged events first
        # Since when Redis has answered without a break (learners are heard through it).
        self.listening_since = time.time()

    async def run(self, stop: asyncio.Event) -> None:
        await streams.aensure_learner_group(self.ctx.redis, CONSUMER_GROUP)
        try:  # at once, not at the first sweep: what was published before may be stale
            await scheduling.publish_nodes(self.ctx)
        except (BackendUnavailable, RedisError, OSError) as error:
            log.warning("monitor: the cluster's nodes are published later: %s", error)
        # Beside the event loop below, so neither waits for the other.
        relaying = asyncio.create_task(self.relay.run(stop))
        syncing = asyncio.create_task(self.sync_job_users(stop))
        loop = asyncio.get_running_loop()
        next_claim = next_beat_check = 0.0
        while not stop.is_set():
            self.heartbeat.beat()
            try:
                if loop.time() >= next_claim:
                    await self.claim_stale()
                    next_claim = loop.time() + CLAIM_EVERY_S
                if loop.time() >= next_beat_check:
                    next_beat_check = loop.time() + HEARTBEAT_CHECK_EVERY_S
                    await self.check_heartbeats()
                await self.step()
            except (RedisError, OSError) as error:
                log.warning("monitor: %s; retrying", error)
                await asyncio.sleep(1)
                self.listening_since = time.time()
        await asyncio.gather(relaying, syncing)
        await self.drain(DRAIN_ON_STOP_S)

    async def drain(self, timeout_s: float) -> None:
        """Handle the events already sent (for at most `timeout_s`): a monitor told to stop
        first records what its learners just reported, such as being stopped."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        try:
            await self.relay.relay_all()
            while asyncio.get_running_loop().time() < deadline:
                own_backlog = self._backlog  # an empty read of it says nothing of new events
                if not await self.step(block_ms=DRAIN_BLOCK_MS) and not own_backlog:
                    return
        except (RedisError, OSError) as error:
            log.warning("monitor: stopping without handling every event: %s", error)

    async def check_heartbeats(self) -> None:
        try:
            await check_heartbeats(self.ctx, self.listening_since)
        except (RedisError, OSError):
            raise
        except Exception:  # a bad job must not stop the monitor; the next check retries
            log.exception("monitor: heartbeat check failed")

    async def sync_job_users(self, stop: asyncio.Event) -> None:
        """Keep Redis's job users in line with the database, every `JOB_USERS_EVERY_S`."""
        while not stop.is_set():
            try:
                await job_users.sync(self.ctx)
            except (RedisError, OSError) as error:
                log.warning("monitor: keeping job users in line: %s; retrying", error)
            except Exception:  # the database may be away; the next pass retries
                log.exception("monitor: keeping job users in line failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), JOB_USERS_EVERY_S)

    async def step(self, block_ms: int | None = BLOCK_MS) -> int:
        """Read and handle one batch; returns how many events it handled. `block_ms`: how
        long to wait for events when there are none (None: not at all)."""
        pending = self._backlog
        entries = await streams.aread_learner_events(
            self.ctx.redis, CONSUMER_GROUP, self.consumer, block_ms, BATCH, pending=pending
        )
        if pending and not entries:
            self._backlog = False
        return await self.handle(entries)

    async def claim_stale(self) -> None:
        """Take over events another consumer was given but never acknowledged."""
        entries = await streams.aclaim_learner_events(
            self.ctx.redis, CONSUMER_GROUP, self.consumer, CLAIM_IDLE_MS, BATCH
        )
        await self.handle(entries)

    async def handle(self, entries: Entries) -> int:
        """Apply a batch, each job's events together; returns how many were handled. An
        event that fails holds up only its own job: it is read again on the next step, and
        dropped after MAX_FAILURES."""
        handled = 0
        failed = False
        side_effects: list[asyncio.Task[None]] = []
        for job_id, group in by_job(entries):
            done = await self._apply(job_id, group, side_effects)
            handled += done
            failed = failed or done < len(group)
        # Each job's side effects (stopping learners, scheduling a restart) went on while
        # the next jobs' events were recorded; the batch ends when they are all done.
        await asyncio.gather(*side_effects)
        if failed:
            self._backlog = True  # read the failed events again on the next step
            await asyncio.sleep(FAILURE_PAUSE_S)
        return handled

    async def _apply(
        self, job_id: str, group: Entries, side_effects: list[asyncio.Task[None]]
    ) -> int:
        """Apply and acknowledge one job's events, and start carrying out the steps they
        led to (into `side_effects`); how many of the events, in order, went."""
        try:
            settled = await apply_learner_events(self.ctx, job_id, [event for _, event in group])
        except Exception:
            if len(group) > 1:  # find the event that fails: each on its own, in order
                done = 0
                while done < len(group) and await self._apply(job_id, [group[done]], side_effects):
                    done += 1
                return done
            [(entry_id, event)] = group
            self.failures[entry_id] += 1
            log.exception("monitor: event %s failed (%s)", entry_id, event)
            if self.failures[entry_id] < MAX_FAILURES:
                return 0
            log.error("monitor: dropping event %s after %s failures", entry_id, MAX_FAILURES)
        else:
            if settled is not None and settled.decisions:
                side_effects.append(asyncio.create_task(self._carry_out(settled)))
        ids = [entry_id for entry_id, _ in group]
        await streams.aack_learner_events(self.ctx.redis, CONSUMER_GROUP, ids)
        for entry_id in ids:
            self.failures.pop(entry_id, None)
        return len(group)

    async def _carry_out(self, settled: Settled) -> None:
        """A step's side effects; one that fails is taken again by the reconcile."""
        try:
            await settled.carry_out(self.ctx)
        except Exception:
            log.exception("monitor: carrying out %s", settled)


def by_job(entries: Entries) -> list[tuple[str, Entries]]:
    """The entries of each job, in the order they came, jobs in the order first seen."""
    groups: dict[str, Entries] = {}
    for entry in entries:
        groups.setdefault(entry[1].job, []).append(entry)
    return list(groups.items())


async def serve(settings: Settings, consumer: str) -> None:
    ctx = open_context(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await Monitor(ctx, consumer).run(stop)
    finally:
        await ctx.aclose()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m lifecycle_manager.entrypoints.monitor")
    parser.add_argument(
        "--consumer",
        default=f"monitor-{socket.gethostname()}",
        help="consumer name in the group; keep it stable across restarts of one monitor",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = Settings()
    upgrade(settings.database_url)
    asyncio.run(serve(settings, args.consumer))


if __name__ == "__main__":
    main()
