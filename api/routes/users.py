"""/v2/users: platform admins create and list users; anyone sees who they are."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy.exc import IntegrityError

from api.access import Allowed
from api.deps import SessionDep, StateDep
from api.errors import Conflict
from api.pagination import PageQuery, name_cursor, name_position, split_page
from api.schemas import (
    TeamMembership,
    UserCreate,
    UserCreated,
    UserList,
    UserPublic,
    UserSummary,
)
from api.services import shared_nodes
from api.services.teams import check_name
from api.services.tokens import minted_expiry
from storage.models import utcnow
from storage.users import create_user, users_after

router = APIRouter(prefix="/v2/users", tags=["users"])


@router.post("", status_code=201, response_model=UserCreated)
async def add_user(
    body: UserCreate, session: SessionDep, user: Allowed, state: StateDep
) -> UserCreated:
    """A new user, with a team of their own named after them and a token named default,
    which expires when the token that asks for it does (never, when that one never does)."""
    check_name(body.name)
    expires_at = minted_expiry(utcnow(), None, user.token_expires_at)
    try:
        created, token = await create_user(
            session, body.name, is_admin=body.admin, token_expires_at=expires_at
        )
        await session.commit()
    except IntegrityError:
        raise Conflict(f"a user or team named {body.name!r} exists already", field="name") from None
    return UserCreated(
        name=created.name,
        token=token,
        admin=created.is_admin,
        team=created.name,
        warning=await shared_nodes.shared_user_warning(state),
    )


@router.get("", response_model=UserList)
async def list_users(session: SessionDep, user: Allowed, page: PageQuery) -> UserList:
    """Every user by name, a page at a time."""
    after = name_position("users", page.cursor) if page.cursor is not None else None
    rows, more = split_page(await users_after(session, after, page.limit + 1), page.limit)
    return UserList(
        users=[UserSummary(name=u.name, admin=u.is_admin, created_at=u.created_at) for u in rows],
        next=name_cursor("users", rows[-1].name) if more else None,
    )


@router.get("/me", response_model=UserPublic)
async def who_am_i(user: Allowed) -> UserPublic:
    """The user this token belongs to, with their teams and roles: the dashboard's sign-in
    checks a token with it."""
    teams = [
        TeamMembership(team=team.team, role=team.role.value, personal=team.personal)
        for team in user.teams
    ]
    return UserPublic(name=user.name, admin=user.is_admin, teams=teams)
