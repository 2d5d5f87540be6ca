"""Refuses a NUL character in a request's query (422 naming the parameter).

No name, id or filter dlaas stores or looks up may hold one (PostgreSQL's text cannot), so a
query that carries one is refused before any route passes it on to the database. Path
parameters are checked by their routes' own patterns.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send


def nul_field(scope: Scope) -> str | None:
    """The query parameter that holds a NUL character, or None."""
    query = scope.get("query_string", b"").decode("latin-1")
    if "%00" not in query and "\x00" not in query:
        return None
    for name, value in parse_qsl(query, keep_blank_values=True):
        if "\x00" in name or "\x00" in value:
            return name.replace("\x00", "") or "query"
    return None


class NulGuardMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        field = nul_field(scope) if scope["type"] == "http" else None
        if field is None:
            await self.app(scope, receive, send)
            return
        body = orjson.dumps(
            {
                "error": "invalid_request",
                "detail": f"{field} holds a NUL character, which no name or id may; remove it",
                "field": field,
            }
        )
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 422, "headers": headers})
        await send({"type": "http.response.body", "body": body})
