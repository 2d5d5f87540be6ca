"""The served OpenAPI states what the API does: dlaas's error body, every error status an
operation can answer with, and bearer auth where a token is required.

FastAPI documents a 422 of its own shape (HTTPValidationError) and none of the statuses that
dependencies, middleware and services give. `install_contract` rewrites its document from one
table, ERROR_STATUSES. Most of its rules read a route's own declaration (its dependencies,
parameters and body), so a new route is described by what it declares; the refusals a
service makes for a few operations only (409, 411) name those operations, and the 403 of a
role too weak is read from the permission table (`api.permissions`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute

from api.deps import get_principal
from api.permissions import PERMISSIONS, Level, Scope
from api.routes.job_objects import job_credential

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Every error dlaas answers with, whatever its status.",
    "required": ["error", "detail"],
    "properties": {
        "error": {"type": "string", "description": "a machine-readable code, e.g. not_found"},
        "detail": {"type": "string", "description": "what is wrong, and how to put it right"},
        "field": {
            "type": "string",
            "description": "the offending field, parameter or header, as a dotted path",
        },
    },
    "additionalProperties": False,
}
ERROR_SCHEMA_NAME = "Error"
ERROR_REF = {"$ref": f"#/components/schemas/{ERROR_SCHEMA_NAME}"}
BEARER = "bearer"
# FastAPI's own error shapes, which no dlaas answer has
_FASTAPI_ERROR_SCHEMAS = ("HTTPValidationError", "ValidationError")

Rule = Callable[[APIRoute], bool]


@dataclass(frozen=True)
class ErrorStatus:
    status: int
    description: str
    applies: Rule
    headers: Mapping[str, Any] = field(default_factory=dict)


def _dependants(dependant: Dependant) -> Iterator[Dependant]:
    yield dependant
    for sub in dependant.dependencies:
        yield from _dependants(sub)


def everywhere(_route: APIRoute) -> bool:
    return True


def authenticated(route: APIRoute) -> bool:
    """A user's token (`get_principal`) or a job's (`job_credential`) is required."""
    return any(d.call in (get_principal, job_credential) for d in _dependants(route.dependant))


def job_gateway(route: APIRoute) -> bool:
    return any(d.call is job_credential for d in _dependants(route.dependant))


def parses_body(route: APIRoute) -> bool:
    declares = any(d.body_params for d in _dependants(route.dependant))
    return declares or "requestBody" in (route.openapi_extra or {})


def takes_input(route: APIRoute) -> bool:
    declares = any(
        d.path_params or d.query_params or d.header_params or d.cookie_params
        for d in _dependants(route.dependant)
    )
    return declares or parses_body(route)


def any_of(*rules: Rule) -> Rule:
    return lambda route: any(rule(route) for rule in rules)


def takes_path_parameters(route: APIRoute) -> bool:
    return bool(route.param_convertors)


def operations(*names: str) -> Rule:
    """Routes named `METHOD /path/{param}` as the document spells them."""
    return lambda route: any(f"{m} {route.path_format}" in names for m in route.methods or ())


def role_refusable(route: APIRoute) -> bool:
    """The route's rule (`api.permissions`) takes more than any caller who reaches the
    team or job at all holds: a weaker one is refused (403)."""
    return any(
        rule.least > _LEAST_TO_REACH[rule.scope]
        for method in route.methods or ()
        if (rule := PERMISSIONS.get(f"{method} {route.path_format}")) is not None
    )


# What a caller holds once the scope's team or job is theirs to see at all
_LEAST_TO_REACH = {
    Scope.PLATFORM: Level.SIGNED_IN,
    Scope.TEAM: Level.VIEWER,
    Scope.JOB: Level.VIEWER,
    Scope.CHOSEN_TEAM: Level.VIEWER,
}


def rate_limited(route: APIRoute) -> bool:
    return route.path_format not in ("/healthz", "/metrics")


RETRY_AFTER = {
    "description": "seconds to wait before trying again",
    "schema": {"type": "integer", "minimum": 0},
}

ERROR_STATUSES: tuple[ErrorStatus, ...] = (
    ErrorStatus(
        400,
        "The body cannot be parsed, or Last-Event-ID is not the id of an event.",
        any_of(parses_body, operations("GET /v2/jobs/{job_id}/logs")),
    ),
    ErrorStatus(
        401,
        "No API token, or one dlaas does not know; on /v2/job-objects, no valid job token "
        "(a user's token is refused there, and a job's everywhere else).",
        authenticated,
    ),
    ErrorStatus(
        403,
        "The caller's role is too weak for this (api.permissions: e.g. a viewer halting a "
        "job, or anyone but a platform admin creating users); on /v2/job-objects, the key or "
        "prefix is out of the job token's reach (`field` names it).",
        any_of(role_refusable, job_gateway),
    ),
    ErrorStatus(
        404,
        "No such job or team among the caller's teams' (or the job was deleted), no such "
        "learner, result, member, user or token, or a path parameter that no route takes; on "
        "a submission, no such team (`field`: team) among the caller's; on a plan, no such "
        "calibration job (`field`: calibration) among the caller's teams' jobs.",
        any_of(takes_path_parameters, operations("POST /v2/jobs", "POST /v2/plan")),
    ),
    ErrorStatus(
        409,
        "The job's state, an existing user, team, member or token of that name, the "
        "team's last team admin, or the caller's last usable token does not allow this; or a "
        "request with the same Idempotency-Key is still running (retry after Retry-After).",
        any_of(
            lambda route: "POST" in (route.methods or ()),
            operations(
                "PATCH /v2/teams/{team}/members/{user}",
                "DELETE /v2/teams/{team}/members/{user}",
                "DELETE /v2/tokens/{name_or_id}",
                "DELETE /v2/users/{user}/tokens/{name_or_id}",
            ),
        ),
        {"Retry-After": RETRY_AFTER},
    ),
    ErrorStatus(411, "The upload has no Content-Length.", operations("POST /v2/jobs")),
    ErrorStatus(
        416,
        "`Range` starts at or past the object's end.",
        operations("GET /v2/job-objects/{key}"),
    ),
    # The body limit is a middleware in front of every route, bodiless ones included.
    ErrorStatus(413, "The body is over this route's limit, which the detail names.", everywhere),
    ErrorStatus(
        422, "A parameter, header or the body is not valid; `field` names it.", takes_input
    ),
    # The answers of the per-token and per-address rate limits and of the timeouts on the
    # database, Redis and the object store.
    ErrorStatus(
        429,
        "Too many requests from this token or address; wait Retry-After seconds.",
        rate_limited,
        {"Retry-After": {**RETRY_AFTER, "required": True}},
    ),
    ErrorStatus(
        503,
        "A dependency (database, Redis, object store) did not answer; try again later.",
        everywhere,
        {"Retry-After": RETRY_AFTER},
    ),
)


# The header `api.idempotency` honours on every POST.
IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "one per request: a retry with the same key gets the first answer back",
    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[ -~]+$"},
}


def _error_response(status: ErrorStatus) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": status.description,
        "content": {"application/json": {"schema": ERROR_REF}},
    }
    if status.headers:
        response["headers"] = dict(status.headers)
    return response


def _never_null(parameter: dict[str, Any]) -> None:
    """A parameter is absent or a string on the wire, never null: FastAPI's `X | None` for
    an optional one becomes X."""
    schema = parameter.get("schema", {})
    choices = [c for c in schema.get("anyOf", ()) if c != {"type": "null"}]
    if len(choices) == 1 and len(schema["anyOf"]) == 2:
        rest = {key: value for key, value in schema.items() if key != "anyOf"}
        parameter["schema"] = {**choices[0], **rest}


def state_the_contract(document: dict[str, Any], routes: Iterable[BaseRoute]) -> dict[str, Any]:
    """`document` (FastAPI's OpenAPI) rewritten in place to the contract, and returned.
    Rewriting it again changes nothing."""
    components = document.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for name in _FASTAPI_ERROR_SCHEMAS:
        schemas.pop(name, None)
    schemas[ERROR_SCHEMA_NAME] = ERROR_SCHEMA
    components["securitySchemes"] = {
        BEARER: {"type": "http", "scheme": "bearer", "description": "a dlaas API token"}
    }
    for route in routes:
        if not isinstance(route, APIRoute) or not route.include_in_schema:
            continue
        for method in route.methods or ():
            operation = document["paths"].get(route.path_format, {}).get(method.lower())
            if operation is None:
                continue
            for parameter in operation.get("parameters", ()):
                _never_null(parameter)
            if method == "POST" and authenticated(route):
                parameters = operation.setdefault("parameters", [])
                if IDEMPOTENCY_KEY not in parameters:
                    parameters.append(dict(IDEMPOTENCY_KEY))
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)  # FastAPI's, in its own shape
            for status in ERROR_STATUSES:
                if status.applies(route):
                    responses[str(status.status)] = _error_response(status)
            if authenticated(route):
                operation["security"] = [{BEARER: []}]
    return document


def install_contract(app: FastAPI, routes: Iterable[BaseRoute]) -> None:
    """Serve the contract of `routes` as the app's OpenAPI."""
    generate = app.openapi
    declared = list(routes)

    def openapi() -> dict[str, Any]:
        # FastAPI keeps its document until the routes change; it is stated again each time.
        return state_the_contract(generate(), declared)

    app.openapi = openapi  # type: ignore[method-assign]
