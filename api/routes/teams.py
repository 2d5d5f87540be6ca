"""/v2/teams: teams, their members and the members' roles."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response

from api.access import Allowed, TeamAccess
from api.deps import SessionDep
from api.pagination import PageQuery
from api.quota_schemas import QuotaBody, QuotaPublic, quota_public
from api.schemas import (
    NAME,
    MemberAdd,
    MemberAdded,
    MemberList,
    MemberPublic,
    MemberRole,
    TeamCreate,
    TeamList,
    TeamPublic,
)
from api.services import teams as service
from api.services.team_quotas import set_quota
from storage.roles import Role
from storage.team_quotas import quota_of

router = APIRouter(prefix="/v2/teams", tags=["teams"])

MemberName = Annotated[
    str, Path(pattern=NAME.pattern, max_length=63, description="a member's user name")
]


@router.post("", status_code=201, response_model=TeamPublic)
async def create_team(
    body: TeamCreate, session: SessionDep, user: Allowed, response: Response
) -> TeamPublic:
    """A new team, with no members yet: add them with `POST /v2/teams/{team}/members`."""
    team = await service.create_team(session, user, body.name)
    response.headers["Location"] = f"/v2/teams/{team.name}"
    return team


@router.get("", response_model=TeamList)
async def list_teams(session: SessionDep, user: Allowed, page: PageQuery) -> TeamList:
    """Your teams by name (a platform admin: every team), a page at a time."""
    return await service.list_teams(session, user, page)


@router.get("/{team}", response_model=TeamPublic)
async def get_team(access: TeamAccess, session: SessionDep) -> TeamPublic:
    return await service.team_public(session, access.principal, access.team)


@router.get("/{team}/members", response_model=MemberList)
async def list_members(access: TeamAccess, session: SessionDep, page: PageQuery) -> MemberList:
    """The team's members and their roles, by name, a page at a time."""
    return await service.list_members(session, access.team, page)


@router.post(
    "/{team}/members",
    status_code=201,
    response_model=MemberAdded,
    responses={
        202: {
            "model": MemberAdded,
            "description": "Invited (a team admin's request): the user becomes a member "
            "when they accept",
        }
    },
)
async def add_member(
    body: MemberAdd, access: TeamAccess, session: SessionDep, response: Response
) -> MemberAdded:
    """A platform admin adds the user at once (201); a team admin invites them (202), and
    they join when they accept with `POST /v2/invitations/{team}`."""
    added = await service.add_member(
        session, access.principal, access.team, body.user, Role(body.role)
    )
    if added.invited:
        response.status_code = 202
    return added


@router.patch("/{team}/members/{user}", response_model=MemberPublic)
async def set_role(
    user: MemberName, body: MemberRole, access: TeamAccess, session: SessionDep
) -> MemberPublic:
    return await service.set_role(session, access.team, user, Role(body.role))


@router.delete("/{team}/members/{user}", status_code=204)
async def remove_member(user: MemberName, access: TeamAccess, session: SessionDep) -> Response:
    await service.remove_member(session, access.team, user)
    return Response(status_code=204)


@router.get("/{team}/quota", response_model=QuotaPublic)
async def get_quota(access: TeamAccess) -> QuotaPublic:
    """The team's quota for the scheduler: what it is guaranteed, how far beyond that it
    may borrow other teams' idle quota, its weight and its highest priority."""
    return quota_public(quota_of(access.team))


@router.put("/{team}/quota", response_model=QuotaPublic)
async def put_quota(body: QuotaBody, access: TeamAccess, session: SessionDep) -> QuotaPublic:
    """Set the team's quota as a whole (platform admins only): an amount left out or null is
    not limited, weight 1 and max_priority 0 unless given."""
    return await set_quota(session, access.team, body)
