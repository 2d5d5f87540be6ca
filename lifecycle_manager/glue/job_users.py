"""Redis's job users kept in line with the database: each job that may run has a user that
its live tokens sign in as, and a stopped or deleted job's user goes within a second
(`storage.job_redis_users` says what a user may do; the monitor runs `sync` every second).
Each pass also brings the live jobs' keys back within their bounds (`storage.job_key_bounds`)."""

from __future__ import annotations

import logging
import time

from lifecycle_manager.glue.context import Context
from storage import job_credentials, job_key_bounds, job_redis_users
from storage.job_redis_users import AccessPlan

log = logging.getLogger("dlaas.job_users")


async def sync(ctx: Context) -> AccessPlan:
    """Grant the users the database's live tokens call for and revoke the others."""
    acl = ctx.settings.redis_job_users
    relayed = await job_redis_users.arelayed(ctx.redis)  # before the database: see plan_access
    async with ctx.sessions() as session:
        live = await job_credentials.live_token_hashes(session)
    if acl:
        users = await job_redis_users.ajob_users(ctx.redis)
    else:
        users = {job for job, revoked in relayed.items() if revoked == 0}
    plan = job_redis_users.plan_access(live, users, relayed)
    if plan:
        await job_redis_users.acarry_out(ctx.redis, plan, time.time(), acl=acl)
        if plan.grant:
            log.info("job users granted: %s", ", ".join(plan.grant))
        if plan.revoke:
            log.info("job users revoked: %s", ", ".join(plan.revoke))
    for job_id, keys in (await job_key_bounds.abound_jobs(ctx.redis, sorted(live))).items():
        log.warning(
            "job %s held more in Redis than it may (its user wrote past the platform's "
            "caps): deleted %s",
            job_id,
            ", ".join(keys),
        )
    return plan


async def grant(ctx: Context, job_id: str, token: str) -> None:
    """Let a new token of the job sign in (its learners start next)."""
    token_hash = job_credentials.hash_job_token(token)
    await job_redis_users.agrant(ctx.redis, job_id, [token_hash], acl=ctx.settings.redis_job_users)
