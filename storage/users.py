"""Users: each is made with a team of their own (named after them, where they are team
admin) and an API token named "default" (`storage.api_tokens`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from storage import api_tokens, teams
from storage.models import User, utcnow
from storage.roles import Role


async def create_user(
    session: AsyncSession,
    name: str,
    *,
    is_admin: bool = False,
    token: str | None = None,
    token_expires_at: datetime | None = None,
) -> tuple[User, str]:
    """Create a user, their team and their default token (`token`, else a random one),
    which expires at `token_expires_at` (None: never); returns the user and the token,
    which is never retrievable again."""
    user = User(name=name, is_admin=is_admin)
    session.add(user)
    await session.flush()
    team = await teams.create_team(session, name, personal_user_id=user.id)
    await teams.add_member(session, team.id, user.id, Role.TEAM_ADMIN)
    _, secret = await api_tokens.create_token(
        session, user.id, api_tokens.DEFAULT_TOKEN_NAME, token=token, expires_at=token_expires_at
    )
    return user, secret


async def user_by_name(session: AsyncSession, name: str) -> User | None:
    result = await session.execute(select(User).where(User.name == name))
    return result.scalar_one_or_none()


async def user_by_token(
    session: AsyncSession, token: str, now: datetime | None = None
) -> User | None:
    """The user of a token that is neither revoked nor expired."""
    held = await api_tokens.holder_of(session, token)
    if held is None:
        return None
    row, user = held
    if row.revoked_at is not None:
        return None
    if row.expires_at is not None and api_tokens.aware(row.expires_at) <= (now or utcnow()):
        return None
    return user


async def users_after(session: AsyncSession, after: str | None, count: int) -> Sequence[User]:
    """Up to `count` users by name, past `after`."""
    query = select(User)
    if after is not None:
        query = query.where(User.name > after)
    return (await session.execute(query.order_by(User.name).limit(count))).scalars().all()
