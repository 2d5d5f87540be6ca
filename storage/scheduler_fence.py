"""The scheduler's fence: a scheduling pass writes only if no newer lease holder wrote.

The scheduler's lease (`lifecycle_manager.glue.scheduler_lease`) gives each holder a
fencing token larger than every one before. A pass claims its token first thing in its
transaction, before it reads anything:

    UPDATE scheduler_fence SET token = :mine WHERE id = 1 AND token <= :mine

One row changed: no newer holder has written, and none can until this transaction ends
(PostgreSQL holds the row's lock, SQLite its one writer's lock), so the pass also reads
everything every pass before it committed. No row changed: a newer token wrote, and
`StaleToken` rolls the transaction back with everything the stale pass decided.

A pass waits on nothing between its statements but its own work, so on PostgreSQL its
transaction may sit idle `IDLE_IN_PASS_LIMIT_S` at most: a holder paused in the middle (a
stopped process, a frozen VM) loses its connection, and with it the row's lock the next
holder waits on.
"""

from __future__ import annotations

from sqlalchemy import select, text, update
from sqlalchemy.ext.asyncio import AsyncSession

from storage.models import SchedulerFence

FENCE_ROW = 1
# Several scheduler leases long (`scheduler_lease.LEASE_TTL_S`, 3 s): a pass that computes
# for longer than a lease without yielding to its event loop has lost its lease anyway.
IDLE_IN_PASS_LIMIT_S = 10.0


class StaleToken(Exception):
    """A newer lease holder's pass has written already: this one's decisions are refused."""

    def __init__(self, token: int, newest: int) -> None:
        super().__init__(f"scheduler token {token} is stale: token {newest} has written")
        self.token = token
        self.newest = newest


async def claim(
    session: AsyncSession, token: int, idle_limit_s: float = IDLE_IN_PASS_LIMIT_S
) -> None:
    """Make `token` the newest that wrote, in `session`'s transaction (raises StaleToken)."""
    if session.get_bind().dialect.name == "postgresql":
        limit = f"{int(idle_limit_s * 1000)}ms"
        await session.execute(text(f"SET LOCAL idle_in_transaction_session_timeout = '{limit}'"))
    result = await session.execute(
        update(SchedulerFence)
        .where(SchedulerFence.id == FENCE_ROW, SchedulerFence.token <= token)
        .values(token=token)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount == 1:  # type: ignore[attr-defined]
        return
    newest = await newest_token(session)
    if newest is None:  # a schema made without its migration's row
        session.add(SchedulerFence(id=FENCE_ROW, token=token))
        await session.flush()
        return
    raise StaleToken(token, newest)


async def newest_token(session: AsyncSession) -> int | None:
    """The newest token that wrote (0 before any); None if the fence has no row."""
    query = select(SchedulerFence.token).where(SchedulerFence.id == FENCE_ROW)
    return (await session.execute(query)).scalar_one_or_none()
