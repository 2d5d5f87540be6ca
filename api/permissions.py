"""Who may do what: the one table of the least role each endpoint takes.

Levels, weakest first: any signed-in user; a team's viewer, member, team admin; a platform
admin (`users.is_admin`), who holds every role in every team without belonging to it.
An endpoint's scope says in which team the caller's role counts:

    PLATFORM     none: the caller's own things (tokens, data, usage) or the platform's
    TEAM         the team its path names ({team})
    JOB          the team of the job its path names ({job_id})
    CHOSEN_TEAM  the team a submission names, else the caller's own (`api.services.team_choice`)

A caller with no role in that team gets a 404, as for a team or job that does not exist,
so nothing tells them it does; one whose role is too weak gets a 403 naming the role it
takes. `api.access` applies the table to every route; tests/unit/test_permissions.py and
tests/integration/test_permission_matrix.py check it row by row.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, IntEnum, StrEnum

from storage.roles import Role


class Level(IntEnum):
    SIGNED_IN = 0
    VIEWER = 1
    MEMBER = 2
    TEAM_ADMIN = 3
    PLATFORM_ADMIN = 4

    @classmethod
    def of(cls, role: Role) -> Level:
        return cls[role.name]

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", " ")


class Scope(StrEnum):
    PLATFORM = "platform"
    TEAM = "team"
    JOB = "job"
    CHOSEN_TEAM = "chosen team"


@dataclass(frozen=True)
class Rule:
    scope: Scope
    least: Level
    what: str  # what the endpoint does, as "only a ... may <what>" ends


_P, _T, _J, _C = Scope.PLATFORM, Scope.TEAM, Scope.JOB, Scope.CHOSEN_TEAM
_ANY, _VIEWER, _MEMBER = Level.SIGNED_IN, Level.VIEWER, Level.MEMBER
_TEAM_ADMIN, _ADMIN = Level.TEAM_ADMIN, Level.PLATFORM_ADMIN

# "METHOD /path" as the routes declare it -> the rule it follows.
PERMISSIONS: dict[str, Rule] = {
    # jobs
    "POST /v2/jobs": Rule(_C, _MEMBER, "submit jobs to it"),
    "GET /v2/jobs": Rule(_P, _ANY, "list the jobs of their teams"),
    "GET /v2/jobs/{job_id}": Rule(_J, _VIEWER, "read its jobs"),
    "GET /v2/jobs/{job_id}/events": Rule(_J, _VIEWER, "read its jobs' events"),
    "GET /v2/jobs/{job_id}/logs": Rule(_J, _VIEWER, "read its jobs' logs"),
    "GET /v2/jobs/{job_id}/metrics": Rule(_J, _VIEWER, "read its jobs' metrics"),
    "GET /v2/jobs/{job_id}/results": Rule(_J, _VIEWER, "list its jobs' results"),
    "GET /v2/jobs/{job_id}/results/{path}": Rule(_J, _VIEWER, "download its jobs' results"),
    "GET /v2/jobs/{job_id}/checkpoints": Rule(_J, _VIEWER, "list its jobs' checkpoints"),
    "GET /v2/jobs/{job_id}/checkpoints/{path}": Rule(_J, _VIEWER, "download its jobs' checkpoints"),
    "POST /v2/jobs/{job_id}/halt": Rule(_J, _MEMBER, "halt its jobs"),
    "POST /v2/jobs/{job_id}/resume": Rule(_J, _MEMBER, "resume its jobs"),
    "DELETE /v2/jobs/{job_id}": Rule(_J, _MEMBER, "delete its jobs"),
    # teams
    "POST /v2/teams": Rule(_P, _ADMIN, "create teams"),
    "GET /v2/teams": Rule(_P, _ANY, "list their teams"),
    "GET /v2/teams/{team}": Rule(_T, _VIEWER, "read it"),
    "GET /v2/teams/{team}/members": Rule(_T, _VIEWER, "list its members"),
    "POST /v2/teams/{team}/members": Rule(_T, _TEAM_ADMIN, "add members to it"),
    "PATCH /v2/teams/{team}/members/{user}": Rule(_T, _TEAM_ADMIN, "change its members' roles"),
    "DELETE /v2/teams/{team}/members/{user}": Rule(_T, _TEAM_ADMIN, "remove its members"),
    "GET /v2/invitations": Rule(_P, _ANY, "list their invitations"),
    "POST /v2/invitations/{team}": Rule(_P, _ANY, "accept their invitations"),
    "DELETE /v2/invitations/{team}": Rule(_P, _ANY, "decline their invitations"),
    "GET /v2/teams/{team}/quota": Rule(_T, _VIEWER, "read its quota"),
    "PUT /v2/teams/{team}/quota": Rule(_T, _ADMIN, "set a team's quota"),
    # users and their tokens
    "POST /v2/users": Rule(_P, _ADMIN, "create users"),
    "GET /v2/users": Rule(_P, _ADMIN, "list users"),
    "GET /v2/users/me": Rule(_P, _ANY, "see who they are"),
    "GET /v2/users/{user}/tokens": Rule(_P, _ADMIN, "list another user's tokens"),
    "DELETE /v2/users/{user}/tokens/{name_or_id}": Rule(_P, _ADMIN, "revoke another user's tokens"),
    "POST /v2/tokens": Rule(_P, _ANY, "create their own tokens"),
    "GET /v2/tokens": Rule(_P, _ANY, "list their own tokens"),
    "DELETE /v2/tokens/{name_or_id}": Rule(_P, _ANY, "revoke their own tokens"),
    # the caller's own data, and the platform
    "PUT /v2/data/{container}/{path}": Rule(_P, _ANY, "upload their own data"),
    "GET /v2/data/{container}": Rule(_P, _ANY, "list their own data"),
    "GET /v2/usage": Rule(_P, _ANY, "see their own usage"),
    "GET /v2/cluster": Rule(_P, _ANY, "see the cluster"),
    "GET /v2/queue": Rule(_P, _ANY, "see their teams' waiting jobs"),
    "POST /v2/plan": Rule(_P, _ANY, "plan jobs"),
}


class Decision(Enum):
    ALLOW = "allow"
    HIDE = "hide"  # 404: as if the team or job did not exist
    REFUSE = "refuse"  # 403


def caller_level(is_admin: bool, role: Role | None, scope: Scope) -> Level | None:
    """The caller's level for a rule of `scope`, `role` being theirs in the team it names;
    None when they have none there (not a member, not an admin)."""
    if is_admin:
        return Level.PLATFORM_ADMIN
    if scope is Scope.PLATFORM:
        return Level.SIGNED_IN
    return None if role is None else Level.of(role)


def decide(rule: Rule, level: Level | None) -> Decision:
    if level is None:
        return Decision.HIDE
    return Decision.ALLOW if level >= rule.least else Decision.REFUSE


def refusal(rule: Rule, level: Level, team: str | None = None) -> str:
    """Why a caller at `level` is refused, and what would let them through."""
    least = rule.least.label
    if rule.scope is Scope.PLATFORM or rule.least is Level.PLATFORM_ADMIN:
        return f"only a {least} may {rule.what}"
    return (
        f"you are a {level.label} of team {team}: only a {least} or above may {rule.what}; "
        f"a team admin of {team} can change your role"
    )
