"""What a user keeps in the object store: their data containers and their jobs' results.

Data is counted as it is uploaded (an upload that replaces a file counts the difference);
a job's results are counted once, when the job is final, and stop counting when the job is
deleted. Checkpoints and logs are the platform's own and are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import case, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from storage.models import DataUsage, Job


@dataclass(frozen=True)
class Usage:
    data_bytes: int
    results_bytes: int

    @property
    def used_bytes(self) -> int:
        return self.data_bytes + self.results_bytes


async def usage_of(session: AsyncSession, user_id: int) -> Usage:
    data = await session.scalar(select(DataUsage.data_bytes).where(DataUsage.user_id == user_id))
    results = await session.scalar(
        select(func.coalesce(func.sum(Job.results_bytes), 0)).where(
            Job.owner_id == user_id, Job.deleted_at.is_(None)
        )
    )
    return Usage(data_bytes=int(data or 0), results_bytes=int(results or 0))


async def add_data_bytes(session: AsyncSession, user_id: int, delta: int) -> None:
    """Count `delta` more bytes (fewer, if negative) of the user's data; commits."""
    for _ in range(3):
        added = DataUsage.data_bytes + delta
        changed = await session.execute(
            update(DataUsage)
            .where(DataUsage.user_id == user_id)
            .values(data_bytes=case((added < 0, 0), else_=added))
        )
        if getattr(changed, "rowcount", 0) == 1:
            await session.commit()
            return
        session.add(DataUsage(user_id=user_id, data_bytes=max(delta, 0)))
        try:
            await session.commit()
            return
        except IntegrityError:  # another upload made the row meanwhile: add to it
            await session.rollback()
    raise RuntimeError(f"could not count the data of user {user_id}")


async def set_results_bytes(session: AsyncSession, job_id: str, size: int) -> None:
    await session.execute(update(Job).where(Job.id == job_id).values(results_bytes=size))
