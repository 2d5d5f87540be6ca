"""Users and their API tokens (only a hash of each token is stored)."""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from storage.models import User

TOKEN_PREFIX = "dlaas_"


def hash_token(token: str) -> str:
    # Tokens are 256 random bits, so a fast hash is enough: nothing to brute-force.
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


async def create_user(
    session: AsyncSession, name: str, *, is_admin: bool = False
) -> tuple[User, str]:
    """Create a user; returns the user and its token, which is never retrievable again."""
    token = new_token()
    user = User(name=name, token_hash=hash_token(token), is_admin=is_admin)
    session.add(user)
    await session.flush()
    return user, token


async def user_by_name(session: AsyncSession, name: str) -> User | None:
    result = await session.execute(select(User).where(User.name == name))
    return result.scalar_one_or_none()


async def user_by_token(session: AsyncSession, token: str) -> User | None:
    result = await session.execute(select(User).where(User.token_hash == hash_token(token)))
    return result.scalar_one_or_none()


async def rotate_token(session: AsyncSession, user: User) -> str:
    token = new_token()
    user.token_hash = hash_token(token)
    await session.flush()
    return token
