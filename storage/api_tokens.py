"""Users' named API tokens: made with an optional expiry, listed, revoked (only a hash of
each is kept; the token itself is shown once, when it is made).

A token's last use is written at most once per `LAST_USED_RESOLUTION`, by a conditional
update, so that authenticating a request is a read and not a write.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from storage.models import ApiToken, User, utcnow

TOKEN_PREFIX = "dlaas_"
# The token each user is made with (and the one a user had before tokens had names).
DEFAULT_TOKEN_NAME = "default"
LAST_USED_RESOLUTION = timedelta(minutes=1)
MAX_ID = 2**31 - 1  # the id column's range on PostgreSQL


def hash_token(token: str) -> str:
    # Tokens are 256 random bits, so a fast hash is enough: nothing to brute-force.
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def use_worth_noting(last_used_at: datetime | None, now: datetime) -> bool:
    """Whether a use at `now` changes what the last-used time says, at its resolution."""
    return last_used_at is None or now - aware(last_used_at) >= LAST_USED_RESOLUTION


def aware(moment: datetime) -> datetime:
    """SQLite gives times back without their zone; they are all UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


async def create_token(
    session: AsyncSession,
    user_id: int,
    name: str,
    *,
    expires_at: datetime | None = None,
    token: str | None = None,
) -> tuple[ApiToken, str]:
    """A new token of the user's (`token` when given, else a random one): its row and the
    token itself, which is never retrievable again."""
    secret = token or new_token()
    row = ApiToken(user_id=user_id, name=name, token_hash=hash_token(secret), expires_at=expires_at)
    session.add(row)
    await session.flush()
    return row, secret


async def holder_of(session: AsyncSession, token: str) -> tuple[ApiToken, User] | None:
    """The token's row, revoked or expired as it may be, and its user."""
    query = (
        select(ApiToken, User)
        .join(User, User.id == ApiToken.user_id)
        .where(ApiToken.token_hash == hash_token(token))
    )
    row = (await session.execute(query)).one_or_none()
    return None if row is None else (row[0], row[1])


async def live_tokens_after(
    session: AsyncSession, user_id: int, after_id: int | None, count: int
) -> Sequence[ApiToken]:
    """Up to `count` of the user's tokens not revoked, oldest first, past token `after_id`."""
    query = select(ApiToken).where(ApiToken.user_id == user_id, ApiToken.revoked_at.is_(None))
    if after_id is not None:
        query = query.where(ApiToken.id > after_id)
    return (await session.execute(query.order_by(ApiToken.id).limit(count))).scalars().all()


async def live_token(session: AsyncSession, user_id: int, name_or_id: str) -> ApiToken | None:
    """The user's token not revoked that has this name, or this id (names start with a
    letter, so all digits is an id)."""
    query = select(ApiToken).where(ApiToken.user_id == user_id, ApiToken.revoked_at.is_(None))
    if re.fullmatch(r"[0-9]{1,10}", name_or_id):
        if int(name_or_id) > MAX_ID:
            return None
        query = query.where(ApiToken.id == int(name_or_id))
    else:
        query = query.where(ApiToken.name == name_or_id)
    return (await session.execute(query)).scalar_one_or_none()


async def other_usable_tokens(session: AsyncSession, token: ApiToken, now: datetime) -> int:
    """How many tokens of the token's user besides it are neither revoked nor expired."""
    query = select(func.count()).where(
        ApiToken.user_id == token.user_id,
        ApiToken.id != token.id,
        ApiToken.revoked_at.is_(None),
        or_(ApiToken.expires_at.is_(None), ApiToken.expires_at > now),
    )
    return int((await session.execute(query)).scalar_one())


async def revoke(session: AsyncSession, token: ApiToken) -> None:
    token.revoked_at = utcnow()
    await session.flush()


async def note_use(session: AsyncSession, token_id: int, now: datetime) -> None:
    """Record a use at `now` unless one within `LAST_USED_RESOLUTION` is recorded already
    (by this process or another)."""
    await session.execute(
        update(ApiToken)
        .where(
            ApiToken.id == token_id,
            or_(
                ApiToken.last_used_at.is_(None),
                ApiToken.last_used_at <= now - LAST_USED_RESOLUTION,
            ),
        )
        .values(last_used_at=now)
        # nothing loaded needs it: and SQLite's zoneless times would not compare with `now`
        .execution_options(synchronize_session=False)
    )
