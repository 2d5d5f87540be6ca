"""The scheduler's fence: a scheduling pass writes only if no newer lease holder wrote.

The scheduler's lease (`lifecycle_manager.glue.scheduler_lease`) gives each holder a
fencing token larger than every one before. A pass claims its token first thing in its
transaction, before it reads anything:

    UPDATE scheduler_fence SET token = :mine WHERE id = 1 AND token <= :mine

One row changed: no newer holder has written, and none can until this transaction ends
(PostgreSQL holds the row's lock, SQLite its one writer's lock), so the pass also reads
everything every pass before it committed. No row changed: a newer token wrote, and
`StaleToken` rolls the transaction back with everything the stale pass decided.
"""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from storage.models import SchedulerFence

FENCE_ROW = 1


class StaleToken(Exception):
    """A newer lease holder's pass has written already: this one's decisions are refused."""

    def __init__(self, token: int, newest: int) -> None:
        super().__init__(f"scheduler token {token} is stale: token {newest} has written")
        self.token = token
        self.newest = newest


async def claim(session: AsyncSession, token: int) -> None:
    """Make `token` the newest that wrote, in `session`'s transaction (raises StaleToken)."""
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
