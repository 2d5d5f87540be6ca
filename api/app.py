"""The FastAPI application factory."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from http import HTTPStatus
from typing import Any

from anyio import to_thread
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.exceptions import HTTPException
from starlette.routing import BaseRoute, Match, Route
from starlette.types import Scope

from api.archive import ArchiveLimits
from api.body_limit import BodyLimit, BodyLimitMiddleware, LimitFor
from api.dashboard.routes import install_dashboard
from api.errors import DlaasError
from api.ffdl_v1.errors import FfdlErrorMiddleware
from api.idempotency import IdempotencyMiddleware
from api.manifest import MAX_MANIFEST_BYTES
from api.nudge import Nudger
from api.nul_guard import NulGuardMiddleware
from api.openapi_contract import install_contract
from api.rate_limit import RateLimitMiddleware
from api.routes import (
    data,
    invitations,
    job_objects,
    jobs,
    logs,
    plan,
    queue,
    results,
    system,
    teams,
    tokens,
    usage,
    users,
    v1_events,
    v1_models,
    v1_training_data,
)
from api.state import ApiState
from api.unavailable import unavailable_dependency
from storage import api_tokens, streams
from storage import users as user_repo
from storage.db import make_engine, make_sessionmaker
from storage.migrate import upgrade
from storage.object_store import open_object_store
from storage.settings import Settings

log = logging.getLogger("dlaas.api")

# Every module of routes the API serves
ROUTE_MODULES = (
    jobs,
    logs,
    results,
    data,
    usage,
    queue,
    plan,
    users,
    teams,
    invitations,
    tokens,
    system,
    job_objects,
    # FfDL's /v1, a translation over the services above (`api.ffdl_v1`)
    v1_models,
    v1_training_data,
    v1_events,
)

JSON_BODY_LIMIT = BodyLimit(
    1024**2, "body", "JSON requests are small; send only the fields the route takes"
)
# multipart boundaries and part headers around a submission's manifest and model
SUBMIT_FORM_OVERHEAD = 64 * 1024


async def _ensure_admin(state: ApiState) -> None:
    """The user "admin" holds `DLAAS_ADMIN_TOKEN` as their default token. API workers that
    start together race to make it; the loser finds the winner's."""
    token = state.settings.admin_token
    if not token:
        return
    for _attempt in range(2):
        async with state.sessions() as session:
            held = await api_tokens.holder_of(session, token)
            if held is not None:
                if held[0].revoked_at is not None:
                    log.warning("DLAAS_ADMIN_TOKEN was revoked: set another one")
                return
            try:
                await _admin_holds(session, token)
                await session.commit()
                return
            except IntegrityError:
                await session.rollback()


async def _admin_holds(session: AsyncSession, token: str) -> None:
    """Make `token` the admin's default token, the admin too if there is none yet; a
    default token the admin had before (an older DLAAS_ADMIN_TOKEN) is revoked."""
    admin = await user_repo.user_by_name(session, "admin")
    if admin is None:
        await user_repo.create_user(session, "admin", is_admin=True, token=token)
        return
    old = await api_tokens.live_token(session, admin.id, api_tokens.DEFAULT_TOKEN_NAME)
    if old is not None:
        await api_tokens.revoke(session, old)
    await api_tokens.create_token(session, admin.id, api_tokens.DEFAULT_TOKEN_NAME, token=token)


# What each refusal of Starlette's or FastAPI's own is about
_REFUSAL_FIELDS = {
    HTTPStatus.BAD_REQUEST: "body",
    HTTPStatus.NOT_FOUND: "path",
    HTTPStatus.METHOD_NOT_ALLOWED: "method",
}


def _field_of(location: tuple[object, ...]) -> str:
    parts = [str(p) for p in location if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or "request"


def _problem(error: Mapping[str, Any]) -> str:
    if error["type"] == "extra_forbidden":
        return "is not a field of this request; check its spelling against the API reference"
    return str(error["msg"])


def _allowed_methods(routes: Sequence[BaseRoute], scope: Scope) -> str:
    """Every method some route serves at the request's path. Starlette's own Allow names
    only the first route whose path matched, where a path's methods may be split between
    routes (GET and POST /v2/jobs)."""
    methods = {
        method
        for route in routes
        if isinstance(route, Route) and route.matches(scope)[0] is not Match.NONE
        for method in route.methods or ()
    }
    return ", ".join(sorted(methods))


def _install_error_handlers(app: FastAPI, routes: Sequence[BaseRoute]) -> None:
    @app.exception_handler(DlaasError)
    async def _dlaas_error(_request: Request, error: DlaasError) -> JSONResponse:
        return JSONResponse(error.to_body(), status_code=error.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(_request: Request, error: RequestValidationError) -> JSONResponse:
        problems = [f"{_field_of(e['loc'])}: {_problem(e)}" for e in error.errors()]
        first = error.errors()[0] if error.errors() else {"loc": ()}
        body = {
            "error": "invalid_request",
            "detail": "; ".join(problems) or "the request is not valid",
            "field": _field_of(tuple(first["loc"])),
        }
        return JSONResponse(body, status_code=422)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, error: HTTPException) -> JSONResponse:
        # Starlette's and FastAPI's own refusals: no route, a method the path lacks, or a
        # body that could not be parsed
        status = HTTPStatus(error.status_code)
        body = {"error": status.phrase.lower().replace(" ", "_"), "detail": str(error.detail)}
        if status in _REFUSAL_FIELDS:
            body["field"] = _REFUSAL_FIELDS[status]
        headers = dict(error.headers or {})
        if status is HTTPStatus.METHOD_NOT_ALLOWED:
            headers["Allow"] = _allowed_methods(routes, request.scope)
        return JSONResponse(body, error.status_code, headers=headers)

    @app.exception_handler(Exception)
    async def _bug(request: Request, error: Exception) -> JSONResponse:
        dependency = unavailable_dependency(error)
        if dependency is not None:
            log.warning(
                "%s %s: %s unavailable: %r", request.method, request.url.path, dependency, error
            )
            return JSONResponse(
                {
                    "error": "unavailable",
                    "detail": f"the {dependency} did not answer in time or refused the "
                    "connection; retry shortly",
                    "field": dependency,
                },
                status_code=503,
                headers={"Retry-After": "5"},
            )
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        body = {"error": "internal", "detail": "dlaas hit an internal error; see the API log"}
        return JSONResponse(body, status_code=500)


def _body_limits(app: FastAPI, settings: Settings) -> LimitFor:
    data_limit = BodyLimit(
        settings.max_data_upload_bytes,
        "body",
        "split the data into several files, or raise DLAAS_MAX_DATA_UPLOAD_BYTES",
    )

    # What a learner stores: a checkpoint file, a result, its log.
    job_object_limit = BodyLimit(
        settings.max_job_object_bytes,
        "body",
        "store the checkpoint or result as several files, or raise DLAAS_MAX_JOB_OBJECT_BYTES",
    )

    def submission_limit(field: str) -> BodyLimit:
        state: ApiState = app.state.dlaas
        return BodyLimit(
            state.archive_limits.max_bytes + MAX_MANIFEST_BYTES + SUBMIT_FORM_OVERHEAD,
            field,
            "leave data and checkpoints out of the model archive (upload data with "
            "`dlaas data upload`)",
        )

    def limit_for(method: str, path: str) -> BodyLimit:
        if method == "POST" and path == "/v2/jobs":
            return submission_limit("model")
        if method == "POST" and path == "/v1/models":
            return submission_limit("model_definition")
        if method == "PUT" and path.startswith("/v2/data/"):
            return data_limit
        if method == "PUT" and path.startswith("/v2/job-objects/"):
            return job_object_limit
        return JSON_BODY_LIMIT

    return limit_for


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await to_thread.run_sync(upgrade, settings.database_url)
        engine = make_engine(settings.database_url, timeout_s=settings.database_timeout_s)
        state = ApiState(
            settings=settings,
            engine=engine,
            sessions=make_sessionmaker(engine),
            redis=streams.async_client(
                settings.redis_url,
                retry_timeouts=False,
                socket_connect_timeout=settings.redis_timeout_s,
                socket_timeout=settings.redis_timeout_s,
            ),
            objects=open_object_store(settings),
            nudger=Nudger(settings.redis_url, settings.redis_timeout_s),
            archive_limits=ArchiveLimits.from_settings(settings),
        )
        await _ensure_admin(state)
        app.state.dlaas = state
        try:
            yield
        finally:
            await state.redis.aclose()
            await engine.dispose()

    app = FastAPI(
        title="dlaas",
        description="Deep-learning training as a service.",
        version="0.1.0",
        lifespan=lifespan,
    )
    routers = [module.router for module in ROUTE_MODULES]
    # the routes as their routers declare them, prefixes included
    routes = [route for router in routers for route in router.routes]
    _install_error_handlers(app, routes)
    # The last added runs first: a body over its limit is refused before a key is claimed.
    app.add_middleware(IdempotencyMiddleware)
    app.add_middleware(BodyLimitMiddleware, limit_for=_body_limits(app, settings))
    app.add_middleware(NulGuardMiddleware)
    app.add_middleware(RateLimitMiddleware)
    # added last: runs first, so every refusal on /v1 is put in FfDL's shape
    app.add_middleware(FfdlErrorMiddleware)
    for router in routers:
        app.include_router(router)
    install_dashboard(app)
    install_contract(app, routes)
    return app
