"""Request bodies bounded before they are read: a pure ASGI middleware.

A Content-Length above the route's limit is refused at once, before a byte of the body is
read (a client sending `Expect: 100-continue` never sends it). A body without one (chunked)
is counted as the application reads it and refused as soon as it passes the limit, without
reading the rest. The refusal is dlaas's error body, 413 `too_large`, naming the limit; the
connection is closed after it, as whatever the client still sends will not be read.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import TooLarge


@dataclass(frozen=True)
class BodyLimit:
    max_bytes: int
    field: str  # what the body carries, as the refusal names it
    advice: str  # how to send less


# (method, path) -> the limit of that route's body
LimitFor = Callable[[str, str], BodyLimit]


def describe_size(n: int) -> str:
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit} ({n} bytes)"
    return f"{n} bytes"


class _BodyPassedLimit(Exception):
    """Raised to the application from `receive` once the body passes its limit."""


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit():
            return int(value)
    return None


async def _refuse(send: Send, scope: Scope, limit: BodyLimit, declared: int | None) -> None:
    size = f"is {declared} bytes, over" if declared is not None else "passed"
    detail = (
        f"the request body {size} the limit of {describe_size(limit.max_bytes)} for "
        f"{scope['method']} {scope['path']}; {limit.advice}"
    )
    body = json.dumps(TooLarge(detail, field=limit.field).to_body()).encode()
    await send(
        {
            "type": "http.response.start",
            "status": TooLarge.status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, limit_for: LimitFor) -> None:
        self.app = app
        self.limit_for = limit_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["method"], scope["path"])
        declared = _declared_length(scope)
        if declared is not None and declared > limit.max_bytes:
            await _refuse(send, scope, limit, declared)
            return

        received = 0
        passed = False
        answered = False

        async def counting_receive() -> Message:
            nonlocal received, passed
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit.max_bytes:
                    passed = True
                    raise _BodyPassedLimit
            return message

        async def answer_unless_passed(message: Message) -> None:
            nonlocal answered
            if passed:
                return  # the application's answer to a body it could not read is replaced
            answered = True
            await send(message)

        try:
            await self.app(scope, counting_receive, answer_unless_passed)
        except Exception:
            # Frameworks may wrap the refusal in errors of their own; any error once the body
            # has passed its limit is that refusal.
            if not passed:
                raise
        if passed and not answered:
            await _refuse(send, scope, limit, None)
