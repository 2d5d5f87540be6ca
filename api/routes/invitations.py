"""/v2/invitations: the teams a user is invited into, to accept or decline."""

from __future__ import annotations

from fastapi import APIRouter, Response

from api.access import Allowed, TeamName
from api.deps import SessionDep
from api.schemas import InvitationList, MemberPublic
from api.services import teams as service

router = APIRouter(prefix="/v2/invitations", tags=["teams"])


@router.get("", response_model=InvitationList)
async def list_invitations(session: SessionDep, user: Allowed) -> InvitationList:
    """The teams you are invited into and the roles offered, by team name."""
    return await service.list_invitations(session, user)


@router.post("/{team}", status_code=201, response_model=MemberPublic)
async def accept_invitation(team: TeamName, session: SessionDep, user: Allowed) -> MemberPublic:
    """Join the team with the role its invitation offers."""
    return await service.accept_invitation(session, user, team)


@router.delete("/{team}", status_code=204)
async def decline_invitation(team: TeamName, session: SessionDep, user: Allowed) -> Response:
    await service.decline_invitation(session, user, team)
    return Response(status_code=204)
