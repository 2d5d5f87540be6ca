"""/v2/users: admins create users, each with its own API token."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy.exc import IntegrityError

from api.deps import CurrentUser, SessionDep, StateDep
from api.errors import Conflict, DlaasError, Invalid
from api.schemas import USER_NAME, UserCreate, UserCreated, UserPublic
from api.state import ApiState
from storage import streams
from storage.users import create_user

router = APIRouter(prefix="/v2/users", tags=["users"])


async def shared_user_warning(state: ApiState) -> str | None:
    """What a new user should know when the local backend's nodes run every job as the
    same OS user (no node agent as root): jobs are not isolated from each other there."""
    if state.settings.cluster_backend != "local":
        return None
    nodes = await streams.anode_isolation(state.redis)
    shared = {node: report for node, report in nodes.items() if not report.get("isolated")}
    if not shared:
        return None
    why = "; ".join(f"{node}: {report.get('why', '')}" for node, report in sorted(shared.items()))
    return (
        "jobs on this platform run as one OS user, so one user's job can read another's "
        f"files and the platform's own ({why}); run the node agent as root with "
        "DLAAS_AGENT_ISOLATION=on (docker-compose does) before sharing it"
    )


@router.post("", status_code=201, response_model=UserCreated)
async def add_user(
    body: UserCreate, session: SessionDep, user: CurrentUser, state: StateDep
) -> UserCreated:
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
    return UserCreated(
        name=created.name,
        token=token,
        admin=created.is_admin,
        warning=await shared_user_warning(state),
    )


@router.get("/me", response_model=UserPublic)
async def who_am_i(user: CurrentUser) -> UserPublic:
    """The user this token belongs to: the dashboard's sign-in checks a token with it."""
    return UserPublic(name=user.name, admin=user.is_admin)
