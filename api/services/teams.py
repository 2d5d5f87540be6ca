"""Teams behind the routes: create, list, read, and their members and roles."""

from __future__ import annotations

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from api.auth import Principal
from api.errors import Conflict, Invalid, NotFound
from api.pagination import PageRequest, name_cursor, name_position, split_page
from api.quota_schemas import quota_public
from api.schemas import (
    NAME,
    NAME_RULE,
    InvitationList,
    InvitationPublic,
    MemberAdded,
    MemberList,
    MemberPublic,
    TeamList,
    TeamPublic,
)
from storage import teams as repo
from storage.models import Membership, Team
from storage.roles import Role
from storage.team_quotas import quota_of
from storage.users import user_by_name


def check_name(name: str, field: str = "name") -> None:
    if not NAME.fullmatch(name):
        raise Invalid(f"{field} {name!r} is not a valid name: use {NAME_RULE}", field=field)


async def create_team(session: AsyncSession, user: Principal, name: str) -> TeamPublic:
    check_name(name)
    try:
        team = await repo.create_team(session, name)
        await session.commit()
    except IntegrityError:
        raise Conflict(
            f"a team named {name!r} exists already (every user has a team of their own, "
            "named after them)",
            field="name",
        ) from None
    return await team_public(session, user, team)


async def team_public(session: AsyncSession, user: Principal, team: Team) -> TeamPublic:
    role = user.role_in(team.id)
    return TeamPublic(
        name=team.name,
        personal=team.personal_user_id is not None,
        members=await repo.member_count(session, team.id),
        role=role.value if role is not None else None,
        created_at=team.created_at,
        quota=quota_public(quota_of(team)),
    )


async def list_teams(session: AsyncSession, user: Principal, page: PageRequest) -> TeamList:
    """The caller's teams by name (a platform admin's: every team)."""
    after = name_position("teams", page.cursor) if page.cursor is not None else None
    mine = None if user.is_admin else [team.team_id for team in user.teams]
    rows = await repo.teams_after(session, mine, after, page.limit + 1)
    teams, more = split_page(rows, page.limit)
    return TeamList(
        teams=[await team_public(session, user, team) for team in teams],
        next=name_cursor("teams", teams[-1].name) if more else None,
    )


async def list_members(session: AsyncSession, team: Team, page: PageRequest) -> MemberList:
    after = name_position("members", page.cursor) if page.cursor is not None else None
    rows = await repo.members_after(session, team.id, after, page.limit + 1)
    members, more = split_page(rows, page.limit)
    return MemberList(
        members=[MemberPublic(user=m.user, role=m.role.value) for m in members],
        next=name_cursor("members", members[-1].user) if more else None,
    )


async def add_member(
    session: AsyncSession, caller: Principal, team: Team, name: str, role: Role
) -> MemberAdded:
    """A platform admin (who may list every user) adds the user at once. A team admin
    invites them: nobody joins a team without saying yes, and the answer is the same
    whether or not a user of that name exists, so that adding names to a team does not tell
    which users there are (the team's own members it shows anyway)."""
    check_name(name, "user")
    user = await user_by_name(session, name)
    if user is not None and await repo.membership(session, team.id, user.id) is not None:
        raise Conflict(
            f"{name} is a member of team {team.name} already: change the role with "
            f"`dlaas team set-role {team.name} {name} ROLE`",
            field="user",
        )
    if not caller.is_admin:
        if user is not None:
            await repo.invite(session, team.id, user.id, role)
            await session.commit()
        return MemberAdded(user=name, role=role.value, invited=True)
    if user is None:
        raise NotFound(
            f"no user {name!r}: `dlaas user list` shows them", code="unknown_user", field="user"
        )
    await _join(session, team, user.id, name, role)
    return MemberAdded(user=name, role=role.value, invited=False)


async def _join(session: AsyncSession, team: Team, user_id: int, name: str, role: Role) -> None:
    try:
        await repo.add_member(session, team.id, user_id, role)
        await session.commit()
    except IntegrityError:  # added by a request that ran at the same time
        raise Conflict(f"{name} is a member of team {team.name} already", field="user") from None


async def list_invitations(session: AsyncSession, user: Principal) -> InvitationList:
    invited = await repo.invitations_of(session, user.id)
    return InvitationList(
        invitations=[
            InvitationPublic(team=i.team, role=i.role.value, invited_at=i.invited_at)
            for i in invited
        ]
    )


async def _invited_into(session: AsyncSession, user: Principal, name: str) -> tuple[Team, Role]:
    """The team the user is invited into and the role offered, the invitation taken."""
    team = await repo.team_by_name(session, name)
    role = None if team is None else await repo.take_invitation(session, team.id, user.id)
    if team is None or role is None:
        raise NotFound(
            f"no invitation into team {name!r}: `dlaas team invitations` lists yours",
            field="team",
        )
    return team, role


async def accept_invitation(session: AsyncSession, user: Principal, name: str) -> MemberPublic:
    """The invited user joins the team with the role the invitation offers."""
    team, role = await _invited_into(session, user, name)
    await _join(session, team, user.id, user.name, role)
    return MemberPublic(user=user.name, role=role.value)


async def decline_invitation(session: AsyncSession, user: Principal, name: str) -> None:
    await _invited_into(session, user, name)
    await session.commit()


async def _member(session: AsyncSession, team: Team, name: str) -> Membership:
    user = await user_by_name(session, name)
    found = None if user is None else await repo.membership(session, team.id, user.id)
    if found is None:
        raise NotFound(
            f"{name!r} is not a member of team {team.name}; "
            f"`dlaas team show {team.name}` lists its members",
            field="user",
        )
    return found


async def _keep_a_team_admin(session: AsyncSession, team: Team, member: Membership) -> None:
    """A team keeps at least one team admin, who can manage its members."""
    if member.role != Role.TEAM_ADMIN:
        return
    if await repo.team_admins_besides(session, team.id, member.user_id) == 0:
        raise Conflict(
            f"team {team.name} would have no team admin left: make another member team admin first",
            code="last_team_admin",
            field="user",
        )


async def set_role(session: AsyncSession, team: Team, name: str, role: Role) -> MemberPublic:
    member = await _member(session, team, name)
    if role != Role.TEAM_ADMIN:
        await _keep_a_team_admin(session, team, member)
    member.role = role.value
    await session.commit()
    return MemberPublic(user=name, role=role.value)


async def remove_member(session: AsyncSession, team: Team, name: str) -> None:
    member = await _member(session, team, name)
    await _keep_a_team_admin(session, team, member)
    await session.delete(member)
    await session.commit()
