"""Bearer-token authentication with a short-lived in-process cache of known tokens."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from api.errors import Unauthorized
from storage.job_credentials import is_job_token
from storage.users import hash_token, user_by_token

if TYPE_CHECKING:
    from api.state import ApiState

_CACHE_TTL_S = 30.0
_CACHE_MAX = 4096


@dataclass(frozen=True)
class Principal:
    id: int
    name: str
    is_admin: bool


_cache: dict[str, tuple[float, Principal]] = {}

_FIELD = "Authorization"
_HOW_TO = (
    "send 'Authorization: Bearer <token>'; `dlaas up` writes a token to ~/.dlaas/client.json, "
    "or set DLAAS_TOKEN"
)


async def authenticate(header: str | None, state: ApiState) -> Principal:
    if not header:
        raise Unauthorized(f"no API token: {_HOW_TO}", code="missing_token", field=_FIELD)
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized(
            f"the Authorization header is not a bearer token: {_HOW_TO}", field=_FIELD
        )
    if is_job_token(token.strip()):
        raise Unauthorized(
            "this is a job's token, which reaches only that job's objects through "
            f"/v2/job-objects: {_HOW_TO}",
            code="bad_token",
            field=_FIELD,
        )
    key = hash_token(token.strip())
    now = time.monotonic()
    cached = _cache.get(key)
    if cached is not None and cached[0] > now:
        return cached[1]
    async with state.sessions() as session:
        user = await user_by_token(session, token.strip())
    if user is None:
        raise Unauthorized(
            f"this API token is not known to dlaas: {_HOW_TO}", code="bad_token", field=_FIELD
        )
    principal = Principal(id=user.id, name=user.name, is_admin=user.is_admin)
    if len(_cache) >= _CACHE_MAX:
        _cache.clear()
    _cache[key] = (now + _CACHE_TTL_S, principal)
    return principal
