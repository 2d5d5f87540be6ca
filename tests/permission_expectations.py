"""What the permission table should say, written out apart from it (`api.permissions`), so
that a changed row fails the tests that check it: tests/unit/test_permissions.py decides
each row for each caller, tests/integration/test_permission_matrix.py asks the API."""

from __future__ import annotations

from api.permissions import Decision, Level, Scope
from storage.roles import Role

# What the issue asks, written out again so that a changed row fails here.
EXPECTED: dict[str, tuple[Scope, Level]] = {
    "POST /v2/jobs": (Scope.CHOSEN_TEAM, Level.MEMBER),
    "GET /v2/jobs": (Scope.PLATFORM, Level.SIGNED_IN),
    "GET /v2/jobs/{job_id}": (Scope.JOB, Level.VIEWER),
    "GET /v2/jobs/{job_id}/events": (Scope.JOB, Level.VIEWER),
    "GET /v2/jobs/{job_id}/logs": (Scope.JOB, Level.VIEWER),
    "GET /v2/jobs/{job_id}/metrics": (Scope.JOB, Level.VIEWER),
    "GET /v2/jobs/{job_id}/results": (Scope.JOB, Level.VIEWER),
    "GET /v2/jobs/{job_id}/results/{path}": (Scope.JOB, Level.VIEWER),
    "GET /v2/jobs/{job_id}/checkpoints": (Scope.JOB, Level.VIEWER),
    "GET /v2/jobs/{job_id}/checkpoints/{path}": (Scope.JOB, Level.VIEWER),
    "POST /v2/jobs/{job_id}/halt": (Scope.JOB, Level.MEMBER),
    "POST /v2/jobs/{job_id}/resume": (Scope.JOB, Level.MEMBER),
    "DELETE /v2/jobs/{job_id}": (Scope.JOB, Level.MEMBER),
    "POST /v2/teams": (Scope.PLATFORM, Level.PLATFORM_ADMIN),
    "GET /v2/teams": (Scope.PLATFORM, Level.SIGNED_IN),
    "GET /v2/teams/{team}": (Scope.TEAM, Level.VIEWER),
    "GET /v2/teams/{team}/members": (Scope.TEAM, Level.VIEWER),
    "POST /v2/teams/{team}/members": (Scope.TEAM, Level.TEAM_ADMIN),
    "PATCH /v2/teams/{team}/members/{user}": (Scope.TEAM, Level.TEAM_ADMIN),
    "DELETE /v2/teams/{team}/members/{user}": (Scope.TEAM, Level.TEAM_ADMIN),
    "GET /v2/invitations": (Scope.PLATFORM, Level.SIGNED_IN),
    "POST /v2/invitations/{team}": (Scope.PLATFORM, Level.SIGNED_IN),
    "DELETE /v2/invitations/{team}": (Scope.PLATFORM, Level.SIGNED_IN),
    "GET /v2/teams/{team}/quota": (Scope.TEAM, Level.VIEWER),
    "PUT /v2/teams/{team}/quota": (Scope.TEAM, Level.PLATFORM_ADMIN),
    "POST /v2/users": (Scope.PLATFORM, Level.PLATFORM_ADMIN),
    "GET /v2/users": (Scope.PLATFORM, Level.PLATFORM_ADMIN),
    "GET /v2/users/me": (Scope.PLATFORM, Level.SIGNED_IN),
    "GET /v2/users/{user}/tokens": (Scope.PLATFORM, Level.PLATFORM_ADMIN),
    "DELETE /v2/users/{user}/tokens/{name_or_id}": (Scope.PLATFORM, Level.PLATFORM_ADMIN),
    "POST /v2/tokens": (Scope.PLATFORM, Level.SIGNED_IN),
    "GET /v2/tokens": (Scope.PLATFORM, Level.SIGNED_IN),
    "DELETE /v2/tokens/{name_or_id}": (Scope.PLATFORM, Level.SIGNED_IN),
    "PUT /v2/data/{container}/{path}": (Scope.PLATFORM, Level.SIGNED_IN),
    "GET /v2/data/{container}": (Scope.PLATFORM, Level.SIGNED_IN),
    "GET /v2/usage": (Scope.PLATFORM, Level.SIGNED_IN),
    "GET /v2/cluster": (Scope.PLATFORM, Level.SIGNED_IN),
    "GET /v2/queue": (Scope.PLATFORM, Level.SIGNED_IN),
    "POST /v2/plan": (Scope.PLATFORM, Level.SIGNED_IN),
}

# Callers: (platform admin?, role in the team the row's scope names)
CALLERS: dict[str, tuple[bool, Role | None]] = {
    "outsider": (False, None),
    "viewer": (False, Role.VIEWER),
    "member": (False, Role.MEMBER),
    "team admin": (False, Role.TEAM_ADMIN),
    "platform admin": (True, None),
}
_RANK = {"outsider": 0, "viewer": 1, "member": 2, "team admin": 3, "platform admin": 4}


def expected_decision(scope: Scope, least: Level, caller: str) -> Decision:
    """The issue's rule in plain terms: other teams see nothing; too weak a role is told so."""
    if caller == "platform admin":
        return Decision.ALLOW
    if scope is Scope.PLATFORM:
        return Decision.ALLOW if least is Level.SIGNED_IN else Decision.REFUSE
    if caller == "outsider":
        return Decision.HIDE
    return Decision.ALLOW if _RANK[caller] >= least.value else Decision.REFUSE
