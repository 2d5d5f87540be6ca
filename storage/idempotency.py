"""Requests sent with an `Idempotency-Key`: who runs one, and the answer a retry gets back.

A request claims its key (a `pending` row) before it runs; once it has an answer, the answer
is stored with a fingerprint of the request. A retry with the same key then gets that answer
(or a refusal, if it is a different request), never a second effect. A claim whose request
died with its process is taken over once it is `PENDING_STALE_S` old.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from storage.models import IdempotentRequest, utcnow

PENDING_STALE_S = 60.0
_CLAIM_TRIES = 5


@dataclass(frozen=True)
class Claimed:
    """The key is ours: run the request, then `complete` or `release` it."""


@dataclass(frozen=True)
class InProgress:
    """Another request with this key is running."""

    age_s: float


@dataclass(frozen=True)
class Answered:
    """The request with this key has run; what it was and what it answered."""

    method: str
    path: str
    fingerprint: str | None
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    def same_request(self, method: str, path: str, fingerprint: str) -> bool:
        return (self.method, self.path, self.fingerprint) == (method, path, fingerprint)


Outcome = Claimed | InProgress | Answered


def _answered(row: IdempotentRequest) -> Answered:
    headers: dict[str, Any] = row.headers or {}
    return Answered(
        method=row.method,
        path=row.path,
        fingerprint=row.fingerprint,
        status=row.status or 0,
        headers={str(k): str(v) for k, v in headers.items()},
        body=row.body or b"",
    )


async def claim(
    sessions: async_sessionmaker[AsyncSession],
    scope: str,
    key: str,
    method: str,
    path: str,
    now: datetime | None = None,
) -> Outcome:
    """Claim `key` for a request, or say who has it. Each step commits on its own."""
    for _ in range(_CLAIM_TRIES):
        moment = now or utcnow()
        try:
            async with sessions() as session, session.begin():
                session.add(
                    IdempotentRequest(
                        scope=scope, key=key, method=method, path=path, created_at=moment
                    )
                )
            return Claimed()
        except IntegrityError:
            pass
        async with sessions() as session, session.begin():
            row = await session.get(IdempotentRequest, (scope, key))
            if row is None:  # released meanwhile: try again
                continue
            if row.state == "done":
                return _answered(row)
            created = _aware(row.created_at)
            age = (moment - created).total_seconds()
            if age < PENDING_STALE_S:
                return InProgress(age)
            # Its request died with its process: take the claim over, unless another did.
            taken = await session.execute(
                update(IdempotentRequest)
                .where(
                    IdempotentRequest.scope == scope,
                    IdempotentRequest.key == key,
                    IdempotentRequest.state == "pending",
                    IdempotentRequest.created_at == row.created_at,
                )
                .values(created_at=moment, method=method, path=path)
            )
            if getattr(taken, "rowcount", 0) == 1:
                return Claimed()
    return InProgress(0.0)


async def complete(
    session: AsyncSession,
    scope: str,
    key: str,
    *,
    fingerprint: str,
    status: int,
    headers: dict[str, str],
    body: bytes,
) -> None:
    """Store the answer of a claimed request, in the caller's transaction (so an effect and
    its answer are stored together)."""
    await session.execute(
        update(IdempotentRequest)
        .where(IdempotentRequest.scope == scope, IdempotentRequest.key == key)
        .values(state="done", fingerprint=fingerprint, status=status, headers=headers, body=body)
    )


async def release(sessions: async_sessionmaker[AsyncSession], scope: str, key: str) -> None:
    """Give a claim up (its request failed without an effect worth replaying)."""
    async with sessions() as session, session.begin():
        await session.execute(
            delete(IdempotentRequest).where(
                IdempotentRequest.scope == scope,
                IdempotentRequest.key == key,
                IdempotentRequest.state == "pending",
            )
        )


async def purge(session: AsyncSession, older_than: timedelta, now: datetime | None = None) -> int:
    """Forget keys older than the retention; the number forgotten."""
    cutoff = (now or utcnow()) - older_than
    result = await session.execute(
        delete(IdempotentRequest).where(IdempotentRequest.created_at < cutoff)
    )
    return int(getattr(result, "rowcount", 0) or 0)


def _aware(moment: datetime) -> datetime:
    """SQLite gives naive datetimes back; they were stored in UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
