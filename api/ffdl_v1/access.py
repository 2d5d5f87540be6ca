"""Who a /v1 request acts as, and what it may touch: the same rules as /v2.

A /v1 request signs in with a dlaas bearer token, as on /v2. With
`DLAAS_V1_TRUSTED_USERINFO=true` the API also takes the user FfDL's gateway names in
`X-Watson-Userinfo` (`api.ffdl_v1.mapping.userinfo_user`), but only on a request that carries
the gateway's own secret (`X-Dlaas-Gateway-Token`, `DLAAS_V1_GATEWAY_TOKEN`) and no bearer
token: learners reach the API directly, and a job's code, which holds no such secret, must
not be able to name a user. Otherwise the header is ignored.

Each /v1 operation follows the permission row of the /v2 operation it translates
(`V2_OPERATION_OF`), so /v1 grants nothing /v2 does not.
"""

from __future__ import annotations

import hmac
import re
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Path, Query, Request
from fastapi.routing import APIRoute

from api.access import JobGrant, check_platform, readable_job
from api.auth import Principal, authenticate
from api.deps import StateDep
from api.errors import DlaasError, NotFound, Unauthorized
from api.ffdl_v1.mapping import GATEWAY_TOKEN_HEADER, USERINFO_HEADER, userinfo_user
from api.permissions import PERMISSIONS, Rule
from api.state import ApiState
from storage import users as user_repo
from storage.jobs import JOB_ID_PATTERN
from storage.teams import roles_of

# "METHOD /v1/path" as the routes declare it -> the /v2 operation whose rule it follows
V2_OPERATION_OF: dict[str, str] = {
    "POST /v1/models": "POST /v2/jobs",
    "GET /v1/models": "GET /v2/jobs",
    "GET /v1/models/{model_id}": "GET /v2/jobs/{job_id}",
    "PATCH /v1/models/{model_id}": "POST /v2/jobs/{job_id}/halt",
    "DELETE /v1/models/{model_id}": "DELETE /v2/jobs/{job_id}",
    "GET /v1/models/{model_id}/definition": "GET /v2/jobs/{job_id}",
    "GET /v1/models/{model_id}/trained_model": "GET /v2/jobs/{job_id}/results/{path}",
    "GET /v1/models/{model_id}/logs": "GET /v2/jobs/{job_id}/logs",
    "GET /v1/models/{model_id}/metrics": "GET /v2/jobs/{job_id}/metrics",
    "GET /v1/logs/{model_id}/loglines": "GET /v2/jobs/{job_id}/logs",
    "GET /v1/logs/{model_id}/emetrics": "GET /v2/jobs/{job_id}/metrics",
    "GET /v1/models/{model_id}/events/{event_type}": "GET /v2/jobs/{job_id}/events",
    # dlaas keeps no notification endpoints (`api.routes.v1_events`): registering or
    # removing one writes nothing, so these take what reading the model's events takes
    **{
        f"{method} /v1/models/{{model_id}}/events/{{event_type}}/{{endpoint_id}}": (
            "GET /v2/jobs/{job_id}/events"
        )
        for method in ("GET", "POST", "DELETE")
    },
}

ModelId = Annotated[
    str,
    Path(
        max_length=200,
        description="a model's id, as `POST /v1/models` answered it (a dlaas job's id)",
    ),
]
# FfDL's clients send the API version they speak as a date; every version gets this API.
Version = Annotated[
    str | None, Query(max_length=40, description="FfDL's API version date, e.g. 2017-02-13")
]
_JOB_ID = re.compile(JOB_ID_PATTERN)
_USERINFO_CACHE_PREFIX = "v1-userinfo:"


def _gateway_vouches(request: Request, state: ApiState) -> bool:
    secret = state.settings.v1_gateway_token
    sent = request.headers.get(GATEWAY_TOKEN_HEADER)
    if not state.settings.v1_trusted_userinfo or not secret or sent is None:
        return False
    return hmac.compare_digest(sent.encode(), secret.encode())


async def _userinfo_principal(header: str, state: ApiState) -> Principal:
    name = userinfo_user(header)
    if name is None:
        raise Unauthorized(
            f"{USERINFO_HEADER} names no user: the gateway must send "
            "'bluemix-instance-id=<dlaas user>'",
            code="bad_userinfo",
            field=USERINFO_HEADER,
        )
    key = _USERINFO_CACHE_PREFIX + name
    cached = state.tokens.get(key)
    if cached is not None:
        return cached
    async with state.sessions() as session:
        user = await user_repo.user_by_name(session, name)
        if user is None:
            raise Unauthorized(
                f"{USERINFO_HEADER} names {name!r}, who is not a dlaas user: an admin "
                "adds them with `dlaas user create`",
                code="unknown_user",
                field=USERINFO_HEADER,
            )
        teams = tuple(await roles_of(session, user.id))
    principal = Principal(user.id, user.name, user.is_admin, teams)
    state.tokens.put(key, principal)
    return principal


def _single_header(request: Request, name: str) -> str | None:
    """The header's value; refused when it is sent more than once, which of the values
    counts being up to whoever reads it (a gateway may read another than dlaas)."""
    values = request.headers.getlist(name)
    if len(values) > 1:
        raise DlaasError(
            f"{name} is sent {len(values)} times: the gateway must send it once",
            code="repeated_header",
            field=name,
        )
    return values[0] if values else None


async def v1_principal(request: Request, state: StateDep) -> Principal:
    """The caller: the holder of the bearer token; else, when the operator trusts the
    gateway and the request carries its secret, the user its identity header names."""
    authorization = request.headers.get("authorization")
    userinfo = _single_header(request, USERINFO_HEADER)
    _single_header(request, GATEWAY_TOKEN_HEADER)
    if authorization is None and userinfo is not None and _gateway_vouches(request, state):
        return await _userinfo_principal(userinfo, state)
    return await authenticate(authorization, state)


V1User = Annotated[Principal, Depends(v1_principal)]


def v1_rule(request: Request) -> Rule:
    """The permission rule of the /v2 operation the request's /v1 route translates."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        raise RuntimeError(f"no route matched {request.method} {request.url.path}")
    endpoint = f"{request.method} {route.path_format}"
    return PERMISSIONS[V2_OPERATION_OF[endpoint]]


@dataclass(frozen=True)
class ModelGrant(JobGrant):
    """The caller and the job a /v1 path's model_id names."""


async def authorize_model(
    request: Request, model_id: ModelId, user: V1User, state: StateDep
) -> ModelGrant:
    rule = v1_rule(request)
    if not _JOB_ID.match(model_id):
        raise NotFound(
            f"no model {model_id!r}: model ids are dlaas job ids such as "
            "training-k3m9x2abcd; GET /v1/models lists yours",
            field="model_id",
        )
    job = await readable_job(state, user, model_id, rule, "model_id")
    return ModelGrant(user, job)


ModelAccess = Annotated[ModelGrant, Depends(authorize_model)]


async def authorize_v1(request: Request, user: V1User) -> Principal:
    """For /v1 operations on no one model (submit, list), as their /v2 rows say."""
    return check_platform(v1_rule(request), user)


V1Allowed = Annotated[Principal, Depends(authorize_v1)]
