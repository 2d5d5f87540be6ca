"""Teams and their members, each with a role (`storage.roles.Role`).

Team names and user names are one namespace: a user's own team bears their name.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from storage.models import Invitation, Membership, Team, User
from storage.roles import Role


@dataclass(frozen=True)
class TeamRole:
    """A team a user belongs to, and their role in it."""

    team_id: int
    team: str
    role: Role
    personal: bool  # the team made with the user, named after them


@dataclass(frozen=True)
class Member:
    user: str
    role: Role


async def create_team(
    session: AsyncSession, name: str, *, personal_user_id: int | None = None
) -> Team:
    team = Team(name=name, personal_user_id=personal_user_id)
    session.add(team)
    await session.flush()
    return team


async def team_by_name(session: AsyncSession, name: str) -> Team | None:
    return (await session.execute(select(Team).where(Team.name == name))).scalar_one_or_none()


async def personal_team_id(session: AsyncSession, user_id: int) -> int | None:
    query = select(Team.id).where(Team.personal_user_id == user_id)
    return (await session.execute(query)).scalar_one_or_none()


async def roles_of(session: AsyncSession, user_id: int) -> list[TeamRole]:
    """Every team the user belongs to, by name."""
    query = (
        select(Team, Membership.role)
        .join(Membership, Membership.team_id == Team.id)
        .where(Membership.user_id == user_id)
        .order_by(Team.name)
    )
    return [
        TeamRole(team.id, team.name, Role(role), team.personal_user_id == user_id)
        for team, role in (await session.execute(query)).all()
    ]


async def teams_after(
    session: AsyncSession, team_ids: Collection[int] | None, after: str | None, count: int
) -> Sequence[Team]:
    """Up to `count` teams by name, past `after`: those of `team_ids`, or all for None."""
    query = select(Team)
    if team_ids is not None:
        query = query.where(Team.id.in_(sorted(team_ids)))
    if after is not None:
        query = query.where(Team.name > after)
    return (await session.execute(query.order_by(Team.name).limit(count))).scalars().all()


async def members_after(
    session: AsyncSession, team_id: int, after: str | None, count: int
) -> list[Member]:
    """Up to `count` of the team's members by name, past `after`."""
    query = (
        select(User.name, Membership.role)
        .join(Membership, Membership.user_id == User.id)
        .where(Membership.team_id == team_id)
    )
    if after is not None:
        query = query.where(User.name > after)
    rows = await session.execute(query.order_by(User.name).limit(count))
    return [Member(name, Role(role)) for name, role in rows.all()]


async def member_count(session: AsyncSession, team_id: int) -> int:
    query = select(func.count()).select_from(Membership).where(Membership.team_id == team_id)
    return int((await session.execute(query)).scalar_one())


async def membership(session: AsyncSession, team_id: int, user_id: int) -> Membership | None:
    return await session.get(Membership, (team_id, user_id))


async def add_member(session: AsyncSession, team_id: int, user_id: int, role: Role) -> None:
    session.add(Membership(team_id=team_id, user_id=user_id, role=role.value))
    await session.flush()


async def team_admins_besides(session: AsyncSession, team_id: int, user_id: int) -> int:
    """How many team admins the team has other than the user."""
    query = (
        select(func.count())
        .select_from(Membership)
        .where(
            Membership.team_id == team_id,
            Membership.user_id != user_id,
            Membership.role == Role.TEAM_ADMIN.value,
        )
    )
    return int((await session.execute(query)).scalar_one())


@dataclass(frozen=True)
class Invited:
    team: str
    role: Role
    invited_at: datetime


async def invite(session: AsyncSession, team_id: int, user_id: int, role: Role) -> None:
    """Invite the user into the team with `role` (an earlier invitation takes the new role)."""
    invitation = await session.get(Invitation, (team_id, user_id))
    if invitation is None:
        session.add(Invitation(team_id=team_id, user_id=user_id, role=role.value))
    else:
        invitation.role = role.value
    await session.flush()


async def invitations_of(session: AsyncSession, user_id: int) -> list[Invited]:
    """The user's invitations not yet accepted nor declined, by team name."""
    query = (
        select(Team.name, Invitation.role, Invitation.created_at)
        .join(Invitation, Invitation.team_id == Team.id)
        .where(Invitation.user_id == user_id)
        .order_by(Team.name)
    )
    rows = await session.execute(query)
    return [Invited(name, Role(role), at) for name, role, at in rows.all()]


async def take_invitation(session: AsyncSession, team_id: int, user_id: int) -> Role | None:
    """Remove the user's invitation into the team; the role it offered, None if none."""
    invitation = await session.get(Invitation, (team_id, user_id))
    if invitation is None:
        return None
    role = Role(invitation.role)
    await session.delete(invitation)
    await session.flush()
    return role
