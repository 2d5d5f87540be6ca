"""The permission table, row by row: what each endpoint takes, what each caller gets, and
that every route of the API follows its row through the dependency of its scope."""

from __future__ import annotations

import pytest
from fastapi.routing import APIRoute

from api.access import authorize, authorize_job, authorize_team
from api.app import ROUTE_MODULES
from api.permissions import PERMISSIONS, Level, Rule, Scope, caller_level, decide
from api.permissions import refusal as refusal_text
from storage.roles import Role
from tests.permission_expectations import CALLERS, EXPECTED, expected_decision


def test_the_table_is_the_one_the_issue_asks_for() -> None:
    assert {endpoint: (r.scope, r.least) for endpoint, r in PERMISSIONS.items()} == EXPECTED


@pytest.mark.parametrize("endpoint", sorted(PERMISSIONS))
@pytest.mark.parametrize("caller", sorted(CALLERS))
def test_each_row_lets_through_hides_or_refuses_each_caller(endpoint: str, caller: str) -> None:
    rule = PERMISSIONS[endpoint]
    is_admin, role = CALLERS[caller]
    got = decide(rule, caller_level(is_admin, role, rule.scope))
    assert got is expected_decision(*EXPECTED[endpoint], caller), (endpoint, caller)


def test_a_viewer_is_told_which_role_a_write_takes() -> None:
    halt = PERMISSIONS["POST /v2/jobs/{job_id}/halt"]
    said = refusal_text(halt, Level.VIEWER, "vision")
    assert "you are a viewer of team vision" in said
    assert "only a member or above may halt its jobs" in said
    assert refusal_text(PERMISSIONS["POST /v2/users"], Level.SIGNED_IN) == (
        "only a platform admin may create users"
    )


def test_levels_follow_the_roles_order() -> None:
    assert [Level.of(role) for role in sorted(Role, key=lambda r: r.rank)] == [
        Level.VIEWER,
        Level.MEMBER,
        Level.TEAM_ADMIN,
    ]
    assert all(isinstance(rule, Rule) and rule.what for rule in PERMISSIONS.values())


# Routes a user's token does not reach: the job token gateway, and health and metrics.
_NOT_USER_ROUTES = ("/v2/job-objects", "/healthz", "/metrics")
_DEPENDENCY_OF_SCOPE = {
    Scope.PLATFORM: authorize,
    Scope.CHOSEN_TEAM: authorize,
    Scope.TEAM: authorize_team,
    Scope.JOB: authorize_job,
}


def test_every_route_follows_its_row_through_the_dependency_of_its_scope() -> None:
    served = {}
    for route in (route for module in ROUTE_MODULES for route in module.router.routes):
        if not isinstance(route, APIRoute) or route.path.startswith(_NOT_USER_ROUTES):
            continue
        if not route.path.startswith("/v2/"):
            continue
        for method in route.methods:
            endpoint = f"{method} {route.path_format}"
            served[endpoint] = {dep.call for dep in route.dependant.dependencies}
    assert set(served) == set(PERMISSIONS), "a route without a row, or a row without a route"
    for endpoint, dependencies in served.items():
        expected = _DEPENDENCY_OF_SCOPE[PERMISSIONS[endpoint].scope]
        assert expected in dependencies, endpoint
