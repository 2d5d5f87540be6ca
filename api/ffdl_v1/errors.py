"""Every /v1 error in FfDL's `Error` shape, whoever answered it: a route's service, a
dependency, FastAPI's validation, or a middleware in front of the routes (body limit, rate
limit, idempotency). One place, so no refusal on /v1 escapes in dlaas's own shape."""

from __future__ import annotations

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.ffdl_v1.mapping import ffdl_error

V1_PREFIX = "/v1/"


class FfdlErrorMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(V1_PREFIX):
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        body = b""

        async def translating(message: Message) -> None:
            nonlocal start, body
            if message["type"] == "http.response.start":
                if message["status"] >= 400 and _is_json(message):
                    start = message  # held until the whole body is in
                    return
                await send(message)
                return
            if start is None or message["type"] != "http.response.body":
                await send(message)
                return
            body += message.get("body", b"")
            if message.get("more_body", False):
                return
            await _send_translated(send, start, body)

        await self.app(scope, receive, translating)


def _is_json(start: Message) -> bool:
    for name, value in start.get("headers", ()):
        if name.lower() == b"content-type":
            return bytes(value).startswith(b"application/json")
    return False


async def _send_translated(send: Send, start: Message, body: bytes) -> None:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        await send(start)
        await send({"type": "http.response.body", "body": body})
        return
    status, translated = ffdl_error(start["status"], parsed)
    out = orjson.dumps(translated)
    headers = [
        (name, value)
        for name, value in start.get("headers", ())
        if name.lower() != b"content-length"
    ]
    headers.append((b"content-length", str(len(out)).encode()))
    await send({**start, "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": out})
