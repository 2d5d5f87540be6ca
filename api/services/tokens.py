"""API tokens behind the routes: a user makes, lists and revokes their own; a platform
admin lists and revokes anyone's."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from api.auth import Principal
from api.errors import Conflict, NotFound
from api.pagination import PageRequest, id_cursor, id_position, split_page
from api.schemas import Revoked, TokenCreated, TokenList, TokenPublic
from api.services.teams import check_name
from storage import api_tokens as repo
from storage.models import User, utcnow
from storage.users import user_by_name


def minted_expiry(
    now: datetime, expires_in_s: int | None, minter_expires_at: datetime | None
) -> datetime | None:
    """When a token made with another one expires: as asked, but never after the token that
    made it, so a token that expires cannot pass its holder's access on beyond itself."""
    asked = None if expires_in_s is None else now + timedelta(seconds=expires_in_s)
    bounds = [moment for moment in (asked, minter_expires_at) if moment is not None]
    return min(bounds, default=None)


async def create_token(
    session: AsyncSession, minter: Principal, name: str, expires_in_s: int | None
) -> TokenCreated:
    """A new token of the minter's, expiring when asked or when the minter's token does,
    whichever comes first."""
    check_name(name)
    expires_at = minted_expiry(utcnow(), expires_in_s, minter.token_expires_at)
    try:
        row, secret = await repo.create_token(session, minter.id, name, expires_at=expires_at)
        await session.commit()
    except IntegrityError:
        raise Conflict(
            f"you have a token named {name!r} already: pick another name, or revoke it first "
            f"with `dlaas token revoke {name}`",
            field="name",
        ) from None
    return TokenCreated(**TokenPublic.of(row).model_dump(), token=secret)


async def list_tokens(session: AsyncSession, user_id: int, page: PageRequest) -> TokenList:
    """The user's tokens not revoked, oldest first (expired ones included: their
    `expires_at` says so)."""
    after = id_position("tokens", page.cursor) if page.cursor is not None else None
    rows = await repo.live_tokens_after(session, user_id, after, page.limit + 1)
    tokens, more = split_page(rows, page.limit)
    return TokenList(
        tokens=[TokenPublic.of(token) for token in tokens],
        next=id_cursor("tokens", tokens[-1].id) if more else None,
    )


async def revoke_token(
    session: AsyncSession, user_id: int, name_or_id: str, *, own: bool = True
) -> Revoked:
    """Revoke the token at once: every API worker refuses it within `api.auth.CACHE_TTL_S`.
    A user may not revoke their own last usable token (nothing could sign them in again to
    make another); a platform admin may revoke anyone's."""
    token = await repo.live_token(session, user_id, name_or_id)
    if token is None:
        raise NotFound(
            f"no token {name_or_id!r} that is not revoked already; `dlaas token list` shows "
            "them by name and id",
            field="name_or_id",
        )
    if own and await repo.other_usable_tokens(session, token, utcnow()) == 0:
        raise Conflict(
            f"token {token.name!r} is your last one that works: revoking it would lock you "
            "out. Make another first (`dlaas token create --name NAME`), sign in with it, "
            "then revoke this one",
            code="last_token",
            field="name_or_id",
        )
    await repo.revoke(session, token)
    await session.commit()
    return Revoked(id=token.id, name=token.name)


async def user_named(session: AsyncSession, name: str) -> User:
    user = await user_by_name(session, name)
    if user is None:
        raise NotFound(f"no user {name!r}; `dlaas user list` shows them", field="user")
    return user
