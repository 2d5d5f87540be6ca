"""Jobs' Redis users and the event relay: what they cost and how fast a user dies.

On a Redis database and a PostgreSQL database of their own, with `--jobs` live jobs (default
300), each with a token minted as a deploy mints it:

(a) `grant_all_s`: the monitor's first sync, granting every job's user; `sync_ms_p50/p95`:
    its later passes (`lifecycle_manager.glue.job_users.sync`, once a second in the monitor),
    which find nothing to change.
(b) `relay_hop_ms_p50/p95`: a learner's event, sent as its job's user to the job's stream,
    until a reader of the shared `dlaas:learner-events` has it, with the relay
    (`lifecycle_manager.glue.event_relay`, in this process) waiting on all jobs' streams.
    Baseline in the same run, measured first with no relay running: `direct_hop_ms_p50/p95`,
    the same event written straight to the shared stream (as learners did before).
    `relay_extra_ms_p50` is the difference of the medians.
(c) `relay_events_per_s`: 20 events from each job sent at once, until all are relayed.
(d) `user_lifetime_after_end_s` (max) and `_p50_s`: with the sync running every second as
    in the monitor, from a job's end committed until its token no longer signs in.

Options: `--jobs`, `--hops`, `--ends`. Prints progress, then the FINAL JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from bench._bench_postgres import BenchPostgres
from bench._bench_redis import BenchRedis
from bench._latency_stats import median, percentile, rounded
from bench._small import parse_with_small
from lifecycle_manager.entrypoints.wiring import open_context
from lifecycle_manager.glue import job_users
from lifecycle_manager.glue.context import Context
from lifecycle_manager.glue.event_relay import EventRelay
from storage import job_credentials, job_redis_users, streams
from storage import jobs as repo
from storage.migrate import upgrade
from storage.settings import Settings
from storage.users import create_user

EVENTS_PER_JOB = 20


async def make_jobs(ctx: Context, count: int) -> dict[str, str]:
    """`count` jobs of one user, each with a minted token: job -> token."""
    tokens = {}
    async with ctx.sessions.begin() as session:
        user, _ = await create_user(session, "bench")
        for _ in range(count):
            job = await repo.create_job(
                session, owner_id=user.id, name="bench", learners=1, manifest={}
            )
            tokens[job.id] = await job_credentials.mint(session, job.id)
    return tokens


def learner(url: str, job_id: str, token: str) -> aioredis.Redis:
    return aioredis.Redis.from_url(job_redis_users.learner_url(url, job_id, token))


async def hop_ms(send: Any, reader: aioredis.Redis, marker: str) -> float:
    """Milliseconds from `send()` until an entry with `marker` is in the shared stream."""
    last = await reader.xrevrange(streams.LEARNER_EVENTS, count=1)
    after = last[0][0] if last else "0-0"
    started = time.perf_counter()
    await send()
    while True:
        answer = await reader.xread({streams.LEARNER_EVENTS: after}, block=5000)
        for _, entries in answer:
            for entry_id, fields in entries:
                after = entry_id
                if fields.get(b"marker") == marker.encode():
                    return (time.perf_counter() - started) * 1000


async def signs_in(url: str, job_id: str, token: str) -> bool:
    client = learner(url, job_id, token)
    try:
        return bool(await client.ping())
    except Exception:
        return False
    finally:
        await client.aclose()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="dlaas-bench-redis-") as tmp,
        BenchPostgres() as database,
        BenchRedis() as redis_db,
    ):
        upgrade(database.url)
        settings = Settings(
            home=Path(tmp), database_url=database.url, redis_url=redis_db.url, objects_dir=tmp
        )
        ctx = open_context(settings)
        reader = aioredis.Redis.from_url(redis_db.url)
        stop = asyncio.Event()
        try:
            tokens = await make_jobs(ctx, args.jobs)
            started = time.perf_counter()
            await job_users.sync(ctx)
            grant_all_s = time.perf_counter() - started
            sync_ms = []
            for _ in range(50):
                started = time.perf_counter()
                await job_users.sync(ctx)
                sync_ms.append((time.perf_counter() - started) * 1000)
            print(f"{args.jobs} users granted in {grant_all_s:.3f} s; sync p50 "
                  f"{median(sync_ms):.2f} ms", flush=True)  # fmt: skip

            job_id, token = next(iter(tokens.items()))
            as_learner = learner(redis_db.url, job_id, token)
            direct = aioredis.Redis.from_url(redis_db.url)  # a sender of its own, as learners
            relay = EventRelay(ctx.redis)
            relaying: asyncio.Task[None] | None = None
            hops: dict[str, list[float]] = {"direct": [], "relayed": []}
            for how, sender, key in (
                # first as learners sent events before, with no relay running
                ("direct", direct, streams.LEARNER_EVENTS),
                ("relayed", as_learner, streams.events_key(job_id)),
            ):
                if how == "relayed":
                    relaying = asyncio.create_task(relay.run(stop))
                for n in range(args.hops):
                    event = streams.encode_learner_event(
                        streams.status_event(job_id, 1, 1, "RUNNING")
                    ) | {"marker": f"{how}{n}"}
                    hops[how].append(await hop_ms(
                        lambda s=sender, k=key, e=event: s.xadd(k, e), reader, f"{how}{n}"
                    ))  # fmt: skip
            relayed_ms, direct_ms = hops["relayed"], hops["direct"]
            print(f"hop p50: relayed {median(relayed_ms):.3f} ms, direct "
                  f"{median(direct_ms):.3f} ms", flush=True)  # fmt: skip

            before = await reader.xlen(streams.LEARNER_EVENTS)
            started = time.perf_counter()
            pipe = reader.pipeline(transaction=False)
            for job in tokens:
                event = streams.encode_learner_event(streams.status_event(job, 1, 1, "RUNNING"))
                for _ in range(EVENTS_PER_JOB):
                    pipe.xadd(streams.events_key(job), event)
            await pipe.execute()
            wanted = before + EVENTS_PER_JOB * len(tokens)
            while await reader.xlen(streams.LEARNER_EVENTS) < wanted:
                await asyncio.sleep(0.005)
            relay_rate = EVENTS_PER_JOB * len(tokens) / (time.perf_counter() - started)
            print(
                f"relayed {EVENTS_PER_JOB * len(tokens)} events at {relay_rate:.0f}/s", flush=True
            )

            async def sync_every_second() -> None:
                while not stop.is_set():
                    await job_users.sync(ctx)
                    await asyncio.sleep(1.0)

            syncing = asyncio.create_task(sync_every_second())
            lifetimes = []
            for ended in list(tokens)[1 : 1 + args.ends]:
                async with ctx.sessions.begin() as session:
                    await repo.mark_deleted(session, ended, "deleted")
                ended_at = time.perf_counter()
                while await signs_in(redis_db.url, ended, tokens[ended]):
                    await asyncio.sleep(0.02)
                lifetimes.append(time.perf_counter() - ended_at)
                print(f"job ended: its user refused after {lifetimes[-1]:.3f} s", flush=True)
            stop.set()
            await asyncio.gather(syncing, *([relaying] if relaying else []))
            await as_learner.aclose()
            await direct.aclose()
            granted = set(tokens) - set(list(tokens)[1 : 1 + args.ends])
            await job_redis_users.arevoke(ctx.redis, sorted(granted), time.time())
        finally:
            stop.set()
            await reader.aclose()
            await ctx.aclose()
    return {
        "jobs": args.jobs,
        "grant_all_s": rounded(grant_all_s, 3),
        "sync_ms_p50": rounded(median(sync_ms), 3),
        "sync_ms_p95": rounded(percentile(sync_ms, 95), 3),
        "relay_hop_ms_p50": rounded(median(relayed_ms), 3),
        "relay_hop_ms_p95": rounded(percentile(relayed_ms, 95), 3),
        "direct_hop_ms_p50": rounded(median(direct_ms), 3),
        "direct_hop_ms_p95": rounded(percentile(direct_ms, 95), 3),
        "relay_extra_ms_p50": rounded(median(relayed_ms) - median(direct_ms), 3),
        "relay_events_per_s": round(relay_rate),
        "user_lifetime_after_end_s": rounded(max(lifetimes), 3),
        "user_lifetime_after_end_p50_s": rounded(median(lifetimes), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--hops", type=int, default=200)
    parser.add_argument("--ends", type=int, default=8)
    args = parse_with_small(parser, {"jobs": 20, "hops": 20, "ends": 2})
    print(json.dumps({"bench": "redis_isolation", **asyncio.run(run(args))}), flush=True)


if __name__ == "__main__":
    main()
