"""`Idempotency-Key` on every POST: a retry of a request gets the first request's answer.

A POST that carries the header claims the key (scoped to the credentials it was sent with)
before it runs. A retry of the same request (method, path and body fingerprint) gets the
stored answer back, with `Idempotent-Replayed: true`; a different request with a used key is
refused (422), and one sent while the first still runs is told to retry (409, `Retry-After`).
Answers of 5xx, 401, 408 and 429 are not stored: the request may be retried for real.

A route whose effect must never happen twice (a job submission) stores its answer itself,
in the transaction of its effect, through the `Claim` in `request.state.idempotency`; for
the others the answer is stored once it has been sent.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.request_fingerprint import BodyFingerprint
from storage import idempotency as repo

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

    from api.state import ApiState

HEADER = "Idempotency-Key"
MAX_KEY_CHARS = 255
MAX_STORED_BODY = 256 * 1024
_NOT_STORED = frozenset({401, 408, 429})
_KEPT_HEADERS = frozenset({b"content-type", b"location"})


@dataclass
class Claim:
    """The key a running request holds, for a route that stores its answer itself."""

    scope: str
    key: str
    fingerprint: BodyFingerprint
    completed: bool = False

    async def store_answer(
        self, session: AsyncSession, status: int, body: bytes, headers: dict[str, str]
    ) -> None:
        """Store the answer in `session`'s transaction (the body must have been read)."""
        await repo.complete(
            session,
            self.scope,
            self.key,
            fingerprint=self.fingerprint.hexdigest(),
            status=status,
            headers=headers,
            body=body,
        )
        self.completed = True


def claim_of(state: Any) -> Claim | None:
    """The request's claim (`request.state`), if it was sent with a key."""
    claim = getattr(state, "idempotency", None)
    return claim if isinstance(claim, Claim) else None


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value)
    return None


def _gateway_identity(scope: Scope) -> bytes | None:
    """The user a trusted gateway names on /v1 (`api.ffdl_v1.access`) with its secret: the
    credentials of a request without a token. A request that names a user without the
    secret is refused (401) and its answer is not stored."""
    userinfo = _header(scope, b"x-watson-userinfo")
    secret = _header(scope, b"x-dlaas-gateway-token")
    if userinfo is None or secret is None:
        return None
    return b"gateway\0" + userinfo + b"\0" + secret


def _key_problem(raw: bytes) -> str | None:
    try:
        key = raw.decode("ascii")
    except UnicodeDecodeError:
        return f"{HEADER} must be ASCII text"
    if not key or len(key) > MAX_KEY_CHARS:
        return f"{HEADER} must be 1 to {MAX_KEY_CHARS} characters"
    if not key.isprintable():
        return f"{HEADER} must be printable characters"
    return None


async def _answer(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _refuse(
    send: Send, status: int, code: str, detail: str, extra: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    body = orjson.dumps({"error": code, "detail": detail, "field": HEADER})
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await _answer(send, status, body, [*headers, *extra])


async def _drain(receive: Receive, fingerprint: BodyFingerprint) -> None:
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return
        fingerprint.feed(message.get("body", b""))
        if not message.get("more_body", False):
            return


class IdempotencyMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        raw_key = _header(scope, b"idempotency-key")
        credentials = _header(scope, b"authorization") or _gateway_identity(scope)
        if raw_key is None or credentials is None:  # no key, or refused as unauthenticated
            await self.app(scope, receive, send)
            return
        problem = _key_problem(raw_key)
        if problem is not None:
            await _refuse(send, 422, "invalid_idempotency_key", problem)
            return
        state: ApiState = scope["app"].state.dlaas
        key = raw_key.decode("ascii")
        owner = hashlib.sha256(credentials).hexdigest()
        method, path = scope["method"], scope["path"]
        # the query is part of the request (POST /v2/plan?calibration=...): a retry that
        # names another job is a different request
        query = scope.get("query_string", b"").decode("latin-1")
        target = f"{path}?{query}" if query else path
        fingerprint = BodyFingerprint(method, target, _header(scope, b"content-type") or b"")
        outcome = await repo.claim(state.sessions, owner, key, method, path)
        if isinstance(outcome, repo.InProgress):
            await _refuse(
                send,
                409,
                "request_in_progress",
                f"a request with this {HEADER} is still running; retry it in a moment",
                ((b"retry-after", b"1"),),
            )
            return
        if isinstance(outcome, repo.Answered):
            await _drain(receive, fingerprint)
            if not outcome.same_request(method, path, fingerprint.hexdigest()):
                await _refuse(
                    send,
                    422,
                    "idempotency_key_reused",
                    f"this {HEADER} was used for a different request ({outcome.method} "
                    f"{outcome.path}); send a new key with each new request",
                )
                return
            headers = [
                (k.encode("latin-1"), v.encode("latin-1")) for k, v in outcome.headers.items()
            ]
            headers += [
                (b"content-length", b"%d" % len(outcome.body)),
                (b"idempotent-replayed", b"true"),
            ]
            await _answer(send, outcome.status, outcome.body, headers)
            return
        await self._run_claimed(scope, receive, send, Claim(owner, key, fingerprint), state)

    async def _run_claimed(
        self, scope: Scope, receive: Receive, send: Send, claim: Claim, state: ApiState
    ) -> None:
        scope.setdefault("state", {})["idempotency"] = claim
        status = 0
        headers: dict[str, str] = {}
        body = bytearray()
        whole = True
        length = _header(scope, b"content-length")
        request_read = length == b"0" or (
            length is None and _header(scope, b"transfer-encoding") is None
        )

        async def fingerprinted() -> Message:
            nonlocal request_read
            message = await receive()
            if message["type"] == "http.request":
                claim.fingerprint.feed(message.get("body", b""))
                request_read = not message.get("more_body", False)
            return message

        async def captured(message: Message) -> None:
            nonlocal status, whole
            if message["type"] == "http.response.start":
                status = message["status"]
                for name, value in message.get("headers", ()):
                    if name.lower() in _KEPT_HEADERS:
                        headers[name.decode("latin-1").lower()] = value.decode("latin-1")
            elif message["type"] == "http.response.body" and whole:
                body.extend(message.get("body", b""))
                whole = len(body) <= MAX_STORED_BODY
            await send(message)

        try:
            await self.app(scope, fingerprinted, captured)
        except BaseException:
            await repo.release(state.sessions, claim.scope, claim.key)
            raise
        if claim.completed:
            return
        # An answer given before the whole request was read (a refusal) has no fingerprint
        # of it to compare a retry with; such a request is simply run again.
        storable = status and status < 500 and status not in _NOT_STORED
        if whole and storable and request_read:
            async with state.sessions() as session, session.begin():
                await claim.store_answer(session, status, bytes(body), headers)
        else:
            await repo.release(state.sessions, claim.scope, claim.key)
