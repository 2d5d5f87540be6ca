"""Bearer-token authentication: whose token a request carries, and their teams and roles.

What a token stands for is cached in each API process for at most `CACHE_TTL_S`, and never
past the token's expiry, so a revoked token (or a changed role) stops counting on every API
worker within that: nothing has to be published, and a worker that missed a message cannot
go on trusting a token. The price is one indexed lookup per token per `CACHE_TTL_S` per
worker (bench/token_auth.py measures it). A token's last use is written at most once a
minute (`storage.api_tokens.note_use`), on the lookup, never on a cached request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy.exc import SQLAlchemyError

from api.errors import Unauthorized
from storage import api_tokens
from storage.job_credentials import is_job_token
from storage.models import utcnow
from storage.roles import Role
from storage.teams import TeamRole, roles_of

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

    from api.state import ApiState

log = logging.getLogger(__name__)

CACHE_TTL_S = 0.5
_CACHE_MAX = 4096


@dataclass(frozen=True)
class Principal:
    """A signed-in user: who they are, the teams they belong to, the token they used."""

    id: int
    name: str
    is_admin: bool  # a platform admin
    teams: tuple[TeamRole, ...] = ()
    token_id: int | None = None
    # When the token the request carries stops working (None: never); what it mints
    # expires no later (`api.services.tokens.minted_expiry`).
    token_expires_at: datetime | None = None

    def membership(self, team_id: int) -> TeamRole | None:
        return next((team for team in self.teams if team.team_id == team_id), None)

    def role_in(self, team_id: int) -> Role | None:
        team = self.membership(team_id)
        return None if team is None else team.role


class TokenCache:
    """Principals by token hash, each kept until its deadline (monotonic seconds)."""

    def __init__(
        self, ttl_s: float = CACHE_TTL_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl_s = ttl_s
        self._clock = clock
        self._entries: dict[str, tuple[float, Principal]] = {}

    def get(self, key: str) -> Principal | None:
        entry = self._entries.get(key)
        if entry is None or entry[0] <= self._clock():
            return None
        return entry[1]

    def put(self, key: str, principal: Principal, expires_in_s: float | None = None) -> None:
        keep = self.ttl_s if expires_in_s is None else min(self.ttl_s, expires_in_s)
        if keep <= 0:
            return
        if len(self._entries) >= _CACHE_MAX:
            self._entries.clear()
        self._entries[key] = (self._clock() + keep, principal)


_FIELD = "Authorization"
_HOW_TO = (
    "send 'Authorization: Bearer <token>'; `dlaas up` writes a token to ~/.dlaas/client.json, "
    "or set DLAAS_TOKEN"
)


def _bearer_token(header: str | None) -> str:
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
    return token.strip()


def _moment(value: datetime) -> str:
    return api_tokens.aware(value).strftime("%Y-%m-%d %H:%M:%S UTC")


async def _look_up(
    session: AsyncSession, token: str, now: datetime
) -> tuple[Principal, datetime | None]:
    """The token's principal and when the token expires; `Unauthorized` if it is unknown,
    revoked or expired."""
    held = await api_tokens.holder_of(session, token)
    if held is None:
        raise Unauthorized(
            f"this API token is not known to dlaas: {_HOW_TO}", code="bad_token", field=_FIELD
        )
    row, user = held
    if row.revoked_at is not None:
        raise Unauthorized(
            f"this API token ({row.name!r} of {user.name}) was revoked at "
            f"{_moment(row.revoked_at)}: use another, or make one with `dlaas token create`",
            code="token_revoked",
            field=_FIELD,
        )
    if row.expires_at is not None and api_tokens.aware(row.expires_at) <= now:
        raise Unauthorized(
            f"this API token ({row.name!r} of {user.name}) expired at "
            f"{_moment(row.expires_at)}: make a new one with `dlaas token create`",
            code="token_expired",
            field=_FIELD,
        )
    if api_tokens.use_worth_noting(row.last_used_at, now):
        await _note_use(session, row.id, now)
    teams = tuple(await roles_of(session, user.id))
    expires_at = None if row.expires_at is None else api_tokens.aware(row.expires_at)
    principal = Principal(
        user.id, user.name, user.is_admin, teams, token_id=row.id, token_expires_at=expires_at
    )
    return principal, expires_at


async def _note_use(session: AsyncSession, token_id: int, now: datetime) -> None:
    """The last-used time is a hint: a database too busy to take it does not refuse the
    request."""
    try:
        await api_tokens.note_use(session, token_id, now)
        await session.commit()
    except SQLAlchemyError as error:
        await session.rollback()
        log.warning("could not record the use of API token %s: %s", token_id, error)


async def authenticate(header: str | None, state: ApiState) -> Principal:
    token = _bearer_token(header)
    key = api_tokens.hash_token(token)
    cached = state.tokens.get(key)
    if cached is not None:
        return cached
    now = utcnow()
    async with state.sessions() as session:
        principal, expires_at = await _look_up(session, token, now)
    expires_in = None if expires_at is None else (expires_at - now).total_seconds()
    state.tokens.put(key, principal, expires_in)
    return principal
