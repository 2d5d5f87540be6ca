"""The dependencies through which every route applies `api.permissions.PERMISSIONS`.

Each finds its route's rule in the table by the route's own method and path, so a route
cannot apply a rule other than its row; a route without a row is a bug (a 500, and a failing
test). `Allowed` is for the PLATFORM and CHOSEN_TEAM scopes, `TeamAccess` resolves the
`{team}` of the path, `JobAccess` the `{job_id}`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Path, Request
from fastapi.routing import APIRoute

from api.auth import Principal
from api.deps import CurrentUser, JobId, StateDep
from api.errors import Forbidden, NotFound
from api.permissions import PERMISSIONS, Decision, Rule, Scope, caller_level, decide, refusal
from api.schemas import NAME
from api.state import ApiState
from storage import jobs as job_repo
from storage import teams as team_repo
from storage.models import Job, Team

TeamName = Annotated[
    str,
    Path(
        pattern=NAME.pattern,
        max_length=63,
        description="a team's name (every user has a team of their own, named after them)",
    ),
]


def rule_of(request: Request, *scopes: Scope) -> Rule:
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        raise RuntimeError(f"no route matched {request.method} {request.url.path}")
    endpoint = f"{request.method} {route.path_format}"
    rule = PERMISSIONS.get(endpoint)
    if rule is None or rule.scope not in scopes:
        raise RuntimeError(f"{endpoint} has no rule of scope {scopes} in api.permissions")
    return rule


def check_platform(rule: Rule, user: Principal) -> Principal:
    """Let the caller through a PLATFORM or CHOSEN_TEAM rule (the chosen team is checked
    by the submission), or refuse them."""
    if rule.scope is Scope.PLATFORM:
        level = caller_level(user.is_admin, None, rule.scope)
        if level is not None and decide(rule, level) is Decision.REFUSE:
            raise Forbidden(refusal(rule, level), field="Authorization")
    return user


async def authorize(request: Request, user: CurrentUser) -> Principal:
    return check_platform(rule_of(request, Scope.PLATFORM, Scope.CHOSEN_TEAM), user)


Allowed = Annotated[Principal, Depends(authorize)]


@dataclass(frozen=True)
class TeamGrant:
    principal: Principal
    team: Team


@dataclass(frozen=True)
class JobGrant:
    principal: Principal
    job: Job


def _check(rule: Rule, user: Principal, team_id: int, hidden: NotFound) -> None:
    """Let the caller through, or refuse: `hidden` when they have no role in the team."""
    membership = user.membership(team_id)
    role = membership.role if membership is not None else None
    level = caller_level(user.is_admin, role, rule.scope)
    decision = decide(rule, level)
    if decision is Decision.HIDE or level is None:
        raise hidden
    if decision is Decision.REFUSE:
        name = membership.team if membership is not None else str(team_id)
        raise Forbidden(refusal(rule, level, name), field="Authorization")


async def authorize_team(
    request: Request, team: TeamName, user: CurrentUser, state: StateDep
) -> TeamGrant:
    rule = rule_of(request, Scope.TEAM)
    hidden = NotFound(
        f"no team {team!r} among your teams; `dlaas team list` shows them", field="team"
    )
    async with state.sessions() as session:
        found = await team_repo.team_by_name(session, team)
    if found is None:
        raise hidden
    _check(rule, user, found.id, hidden)
    return TeamGrant(user, found)


TeamAccess = Annotated[TeamGrant, Depends(authorize_team)]


async def readable_job(
    state: ApiState, user: Principal, job_id: str, rule: Rule, field: str
) -> Job:
    """The job `job_id` if `rule` lets `user` act on it; else the refusal, naming `field`
    (the path's job_id, or a parameter that names a job): a 404 when it is not among the
    caller's teams' jobs or was deleted, a 403 when their role is too weak."""
    hidden = NotFound(
        f"no job {job_id!r} among your teams' jobs; `dlaas list` shows them", field=field
    )
    async with state.sessions() as session:
        job = await job_repo.get_job_any(session, job_id)
    if job is None:
        raise hidden
    _check(rule, user, job.team_id, hidden)
    if job.deleted_at is not None:
        raise NotFound(
            f"job {job_id} was deleted; its logs, checkpoints and results are gone",
            code="deleted",
            field=field,
        )
    return job


async def authorize_job(
    request: Request, job_id: JobId, user: CurrentUser, state: StateDep
) -> JobGrant:
    rule = rule_of(request, Scope.JOB)
    return JobGrant(user, await readable_job(state, user, job_id, rule, "job_id"))


JobAccess = Annotated[JobGrant, Depends(authorize_job)]
