"""Redis users of jobs: a learner reaches Redis only as the ACL user of its own job.

The user `dlaas-job-{id}` signs in with any live token of its job (`storage.job_credentials`;
Redis keeps only the token's SHA-256, which is also the hash the database keeps, so the users
can be made again from the database when Redis lost them). It may append to and read the
job's own keys (`streams.job_keys`: logs, metrics, heartbeats, the job's event stream) and
run nothing else: the Celery broker's lists, other jobs' streams and the shared
`dlaas:learner-events` are out of its reach. A learner's events go to its job's own stream,
from which the lifecycle manager relays them with the job's id taken from the key
(`lifecycle_manager.glue.event_relay`), so a job cannot speak for another.

Which users should exist is decided by `plan_access`, a plain function of what the database
says is live and what Redis holds; the monitor carries the plan out every second, which
revokes a stopped job's user within about a second and makes the users again after Redis
restarted without them. A job's user is granted at once when the job deploys (`agrant`).
Only users this platform granted (listed in its `dlaas:relayed-jobs`) are ever revoked: other
platforms may share the Redis server (on other databases).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote, urlsplit, urlunsplit

from storage import streams

if TYPE_CHECKING:
    from redis.asyncio import Redis as AsyncRedis

USER_PREFIX: Final = "dlaas-job-"
# What the runner sends (XADD, HSET+EXPIRE), may read back of its own job, and what a
# client does on connecting (PING; SELECT of the URL's database).
COMMANDS: Final = ("ping", "select", "xadd", "xread", "xrange", "xlen", "hset", "hgetall", "expire")
WAKE_MAXLEN: Final = 100


def user_name(job_id: str) -> str:
    return USER_PREFIX + job_id


def job_of_user(name: str) -> str | None:
    return name[len(USER_PREFIX) :] if name.startswith(USER_PREFIX) else None


def acl_rules(job_id: str, token_hashes: Sequence[str]) -> list[str]:
    """`ACL SETUSER` rules that add the tokens to the job's user and give it its job's keys
    only; the same rules again change nothing (tokens already known stay valid)."""
    return [
        "on",
        *(f"#{token_hash}" for token_hash in token_hashes),
        "resetkeys",
        *(f"~{key}" for key in streams.job_keys(job_id)),
        "resetchannels",
        "-@all",
        *(f"+{command}" for command in COMMANDS),
    ]


def learner_url(platform_url: str, job_id: str, token: str) -> str:
    """The platform's Redis URL with its credentials replaced by the job's user and token."""
    parts = urlsplit(platform_url)
    host = parts.netloc.rpartition("@")[2]
    userinfo = f"{quote(user_name(job_id), safe='')}:{quote(token, safe='')}"
    return urlunsplit(parts._replace(netloc=f"{userinfo}@{host}"))


@dataclass(frozen=True)
class AccessPlan:
    grant: dict[str, tuple[str, ...]]  # job -> every live token hash: users to (re)make
    revoke: tuple[str, ...]  # jobs whose users go

    def __bool__(self) -> bool:
        return bool(self.grant or self.revoke)


def plan_access(
    live: Mapping[str, Sequence[str]], users: set[str], relayed: Mapping[str, float]
) -> AccessPlan:
    """What to change so that exactly the live jobs have users. `live`: job -> its tokens'
    hashes that the database holds valid; `users`: jobs that have a user in Redis;
    `relayed`: the relayed set (0 = granted by this platform and not revoked).

    Read `relayed` before `live`: a job granted between the two reads is then in neither
    or in both, never revoked because the database read missed it."""
    grant = {
        job: tuple(hashes)
        for job, hashes in live.items()
        if job not in users or relayed.get(job) != 0
    }
    revoke = tuple(sorted(job for job, score in relayed.items() if score == 0 and job not in live))
    return AccessPlan(grant, revoke)


async def agrant(
    redis: AsyncRedis, job_id: str, token_hashes: Sequence[str], *, acl: bool = True
) -> None:
    """Make (or extend) the job's user and relay its event stream. Without `acl` (a Redis
    that refuses ACL commands; `DLAAS_REDIS_JOB_USERS=false`) only the latter."""
    pipe = redis.pipeline(transaction=True)
    if acl:
        rules = acl_rules(job_id, token_hashes)
        pipe.execute_command("ACL", "SETUSER", user_name(job_id), *rules)
    pipe.zadd(streams.RELAYED_JOBS, {job_id: 0})
    pipe.xadd(streams.RELAY_WAKE, {"job": job_id}, maxlen=WAKE_MAXLEN, approximate=True)
    await pipe.execute()


async def arevoke(
    redis: AsyncRedis, job_ids: Sequence[str], now: float, *, acl: bool = True
) -> None:
    """Delete the jobs' users (Redis also disconnects whoever signed in as them); their
    event streams are still relayed for a while (what was sent before counts)."""
    if not job_ids:
        return
    pipe = redis.pipeline(transaction=True)
    if acl:
        pipe.execute_command("ACL", "DELUSER", *(user_name(job) for job in job_ids))
    pipe.zadd(streams.RELAYED_JOBS, dict.fromkeys(job_ids, now), xx=True)
    await pipe.execute()


async def ajob_users(redis: AsyncRedis) -> set[str]:
    """Jobs that have a user in Redis (any platform's)."""
    names = await redis.execute_command("ACL", "USERS")
    return {
        job for job in (job_of_user(streams.as_text(name)) for name in names) if job is not None
    }


async def arelayed(redis: AsyncRedis) -> dict[str, float]:
    answer: list[Any] = await redis.zrange(streams.RELAYED_JOBS, 0, -1, withscores=True)
    return {streams.as_text(job): float(score) for job, score in answer}


async def acarry_out(redis: AsyncRedis, plan: AccessPlan, now: float, *, acl: bool = True) -> None:
    for job_id, hashes in plan.grant.items():
        await agrant(redis, job_id, hashes, acl=acl)
    await arevoke(redis, plan.revoke, now, acl=acl)
