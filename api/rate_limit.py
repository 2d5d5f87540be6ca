"""Rate limits per token and per client address: a 429 with `Retry-After` past them.

Two token buckets a request draws from, one for the credentials it carries and one for the
address it comes from, kept in Redis so that every API worker shares them. A request is let
through only when both have a token, and then takes one from each. Health checks and
Prometheus scrapes are not counted. Should Redis not answer, requests go through: the limit
protects the API, it must not take it down.

Learners are not users: the object gateway (`/v2/job-objects`) moves a job's checkpoints,
results and data a file per request, many at once, and all of a host's learners come from
one address (the node agent's, on the local backend). A job token's requests there draw
from a bucket of that token's own, with the far larger job limits
(`DLAAS_JOB_OBJECTS_RATE_LIMIT_PER_S`, `_BURST`), and not from the address's; a job still
cannot flood the API past its own bucket, and its learners cannot starve each other's jobs.
"""

from __future__ import annotations

import hashlib
import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson
from redis.exceptions import RedisError
from starlette.types import ASGIApp, Receive, Scope, Send

from storage.job_credentials import is_job_token

if TYPE_CHECKING:
    from redis.commands.core import AsyncScript

    from api.state import ApiState

log = logging.getLogger("dlaas.api")

UNCOUNTED_PATHS = frozenset({"/healthz", "/metrics"})
JOB_GATEWAY_PATH = "/v2/job-objects"
_PREFIX = "dlaas:rate:"

# KEYS: the buckets; ARGV: (rate per second, burst) for each, in order. Returns the seconds
# to wait before a token is there for every bucket (0: let through, one token taken from
# each) and the 1-based index of the bucket that waits longest.
_DRAW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local levels = {}
local wait = 0
local longest = 0
for i, key in ipairs(KEYS) do
  local rate = tonumber(ARGV[2 * i - 1])
  local burst = tonumber(ARGV[2 * i])
  local stored = redis.call('HMGET', key, 'at', 'level')
  local level = tonumber(stored[2]) or burst
  local at = tonumber(stored[1]) or now
  level = math.min(burst, level + math.max(0, now - at) * rate)
  levels[i] = level
  if level < 1 and (1 - level) / rate > wait then
    wait = (1 - level) / rate
    longest = i
  end
end
for i, key in ipairs(KEYS) do
  local rate = tonumber(ARGV[2 * i - 1])
  local burst = tonumber(ARGV[2 * i])
  local level = levels[i]
  if wait == 0 then level = level - 1 end
  redis.call('HSET', key, 'at', tostring(now), 'level', tostring(level))
  redis.call('PEXPIRE', key, math.ceil(burst / rate * 1000) + 1000)
end
return {tostring(wait), longest}
"""


@dataclass(frozen=True)
class Limit:
    per_s: float
    burst: int

    @property
    def on(self) -> bool:
        return self.per_s > 0 and self.burst > 0


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value)
    return None


def buckets(
    scope: Scope, per_token: Limit, per_address: Limit, per_job: Limit | None = None
) -> list[tuple[str, Limit]]:
    """The buckets a request draws from: its credentials' and its address's; a job token's
    on the object gateway, only its own."""
    drawn: list[tuple[str, Limit]] = []
    credentials = _header(scope, b"authorization")
    if (
        per_job is not None
        and credentials
        and scope.get("path", "").startswith(JOB_GATEWAY_PATH)
        and _is_job_token(credentials)
    ):
        if per_job.on:
            digest = hashlib.sha256(credentials).hexdigest()[:32]
            drawn.append((f"{_PREFIX}job:{digest}", per_job))
        return drawn
    if credentials and per_token.on:
        drawn.append((f"{_PREFIX}token:{hashlib.sha256(credentials).hexdigest()[:32]}", per_token))
    client = scope.get("client")
    if client and per_address.on:
        drawn.append((f"{_PREFIX}addr:{client[0]}", per_address))
    return drawn


def _is_job_token(credentials: bytes) -> bool:
    scheme, _, token = credentials.partition(b" ")
    return scheme.lower() == b"bearer" and is_job_token(token.strip().decode("latin-1"))


async def _too_many(send: Send, wait_s: float, what: str) -> None:
    retry_after = max(1, math.ceil(wait_s))
    body = orjson.dumps(
        {
            "error": "rate_limited",
            "detail": f"too many requests from this {what}; retry in {retry_after} s",
            "field": "Authorization" if what == "token" else "client",
        }
    )
    await send(
        {
            "type": "http.response.start",
            "status": 429,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", b"%d" % len(body)),
                (b"retry-after", b"%d" % retry_after),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class RateLimitMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._script: AsyncScript | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in UNCOUNTED_PATHS:
            await self.app(scope, receive, send)
            return
        state: ApiState = scope["app"].state.dlaas
        settings = state.settings
        drawn = buckets(
            scope,
            Limit(settings.rate_limit_per_s, settings.rate_limit_burst),
            Limit(settings.address_rate_limit_per_s, settings.address_rate_limit_burst),
            Limit(settings.job_objects_rate_limit_per_s, settings.job_objects_rate_limit_burst),
        )
        if drawn:
            try:
                wait_s, longest = await self._draw(state, drawn)
            except RedisError as exc:
                log.warning("rate limits not applied, Redis did not answer: %s", exc)
                wait_s, longest = 0.0, 0
            if wait_s > 0:
                key = drawn[max(longest, 1) - 1][0]
                what = "address" if ":addr:" in key else "token"
                await _too_many(send, wait_s, what)
                return
        await self.app(scope, receive, send)

    async def _draw(self, state: ApiState, drawn: list[tuple[str, Limit]]) -> tuple[float, int]:
        if self._script is None:
            self._script = state.redis.register_script(_DRAW)
        args: list[str] = []
        for _, limit in drawn:
            args += [repr(limit.per_s), str(limit.burst)]
        wait, longest = await self._script(keys=[key for key, _ in drawn], args=args)
        return float(wait), int(longest)
