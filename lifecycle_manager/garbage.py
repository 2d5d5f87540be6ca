"""What the platform stops keeping once its retention has passed (run by the beat schedule).

Today: the answers kept for retries of POSTs sent with an `Idempotency-Key`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from lifecycle_manager.context import Context
from storage import idempotency


@dataclass(frozen=True)
class Collected:
    idempotent_requests: int

    def __str__(self) -> str:
        return f"forgot {self.idempotent_requests} idempotency key(s)"


async def collect(ctx: Context) -> Collected:
    retention = timedelta(seconds=ctx.settings.idempotency_retention_s)
    async with ctx.sessions() as session, session.begin():
        forgotten = await idempotency.purge(session, retention, ctx.clock())
    return Collected(idempotent_requests=forgotten)
