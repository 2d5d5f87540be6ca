"""Which team a submitted job goes to: the one the submission names (`team`), else the
submitter's own team, else the one team they may submit to.

The caller needs the role `PERMISSIONS["POST /v2/jobs"]` names in that team; a team they
have no role in is refused exactly as one that does not exist.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from api.auth import Principal
from api.errors import Forbidden, Invalid, NotFound
from api.permissions import PERMISSIONS, Decision, Scope, caller_level, decide, refusal
from storage.teams import team_by_name

FIELD = "team"
SUBMIT = PERMISSIONS["POST /v2/jobs"]


@dataclass(frozen=True)
class ChosenTeam:
    id: int
    name: str


def _may_submit(user: Principal, team_id: int) -> bool:
    level = caller_level(user.is_admin, user.role_in(team_id), Scope.CHOSEN_TEAM)
    return decide(SUBMIT, level) is Decision.ALLOW


async def choose_team(session: AsyncSession, user: Principal, asked: str | None) -> ChosenTeam:
    if asked is not None:
        return await _named_team(session, user, asked)
    own = next((team for team in user.teams if team.personal), None)
    if own is not None and _may_submit(user, own.team_id):
        return ChosenTeam(own.team_id, own.team)
    writable = [team for team in user.teams if _may_submit(user, team.team_id)]
    if len(writable) == 1:
        return ChosenTeam(writable[0].team_id, writable[0].team)
    if not writable:
        raise Forbidden(
            "you may submit jobs to no team: a team admin can make you a member of theirs",
            field=FIELD,
        )
    names = ", ".join(sorted(team.team for team in writable))
    raise Invalid(
        f"you may submit to several teams ({names}): name one with `dlaas train --team TEAM` "
        "(the form field team)",
        code="team_required",
        field=FIELD,
    )


async def _named_team(session: AsyncSession, user: Principal, name: str) -> ChosenTeam:
    team = await team_by_name(session, name)
    level = (
        None if team is None else caller_level(user.is_admin, user.role_in(team.id), SUBMIT.scope)
    )
    if team is None or level is None:
        raise NotFound(
            f"no team {name!r} among your teams; `dlaas team list` shows them",
            code="unknown_team",
            field=FIELD,
        )
    if decide(SUBMIT, level) is Decision.REFUSE:
        raise Forbidden(refusal(SUBMIT, level, team.name), field=FIELD)
    return ChosenTeam(team.id, team.name)
