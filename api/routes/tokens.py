"""/v2/tokens: a user's own API tokens; /v2/users/{user}/tokens: anyone's, for platform
admins. A token is shown once, when it is made; a revoked one stops working on every API
worker within `api.auth.CACHE_TTL_S`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from api.access import Allowed
from api.deps import SessionDep
from api.pagination import PageQuery
from api.schemas import NAME, Revoked, TokenCreate, TokenCreated, TokenList
from api.services import tokens as service

router = APIRouter(tags=["tokens"])

# Not `{token}`: a client linking a new token's answer to this path would send the secret.
TokenRef = Annotated[
    str,
    Path(
        pattern=rf"^(?:{NAME.pattern[1:-1]}|[0-9]{{1,10}})$",
        description="a token's name, or its id",
    ),
]
UserName = Annotated[str, Path(pattern=NAME.pattern, max_length=63, description="a user's name")]


@router.post("/v2/tokens", status_code=201, response_model=TokenCreated)
async def create_token(body: TokenCreate, session: SessionDep, user: Allowed) -> TokenCreated:
    """A new token of yours; the answer holds the token itself, which is never shown again.
    It expires no later than the token that asks for it."""
    return await service.create_token(session, user, body.name, body.expires_in)


@router.get("/v2/tokens", response_model=TokenList)
async def list_tokens(session: SessionDep, user: Allowed, page: PageQuery) -> TokenList:
    """Your tokens not revoked, oldest first, a page at a time (never the tokens themselves)."""
    return await service.list_tokens(session, user.id, page)


@router.delete("/v2/tokens/{name_or_id}", response_model=Revoked)
async def revoke_token(name_or_id: TokenRef, session: SessionDep, user: Allowed) -> Revoked:
    """Revoke one of your tokens, by name or id."""
    return await service.revoke_token(session, user.id, name_or_id)


@router.get("/v2/users/{user}/tokens", response_model=TokenList)
async def list_user_tokens(
    user: UserName, session: SessionDep, admin: Allowed, page: PageQuery
) -> TokenList:
    holder = await service.user_named(session, user)
    return await service.list_tokens(session, holder.id, page)


@router.delete("/v2/users/{user}/tokens/{name_or_id}", response_model=Revoked)
async def revoke_user_token(
    user: UserName, name_or_id: TokenRef, session: SessionDep, admin: Allowed
) -> Revoked:
    holder = await service.user_named(session, user)
    return await service.revoke_token(session, holder.id, name_or_id, own=holder.id == admin.id)
