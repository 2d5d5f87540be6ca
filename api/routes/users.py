"""/v2/users: admins create users, each with its own API token."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy.exc import IntegrityError

from api.deps import CurrentUser, SessionDep
from api.errors import Conflict, DlaasError, Invalid
from api.schemas import USER_NAME, UserCreate, UserCreated, UserPublic
from storage.users import create_user

router = APIRouter(prefix="/v2/users", tags=["users"])


@router.post("", status_code=201, response_model=UserCreated)
async def add_user(body: UserCreate, session: SessionDep, user: CurrentUser) -> UserCreated:
    if not user.is_admin:
        raise DlaasError(
            "only an admin can create users", code="forbidden", field="Authorization", status=403
        )
    if not USER_NAME.fullmatch(body.name):
        raise Invalid(
            "name must be 1-63 lowercase letters, digits, '.', '_' or '-', starting with a letter",
            field="name",
        )
    try:
        created, token = await create_user(session, body.name, is_admin=body.admin)
        await session.commit()
    except IntegrityError:
        raise Conflict(f"a user named {body.name!r} exists already", field="name") from None
    return UserCreated(name=created.name, token=token, admin=created.is_admin)


@router.get("/me", response_model=UserPublic)
async def who_am_i(user: CurrentUser) -> UserPublic:
    """The user this token belongs to: the dashboard's sign-in checks a token with it."""
    return UserPublic(name=user.name, admin=user.is_admin)
