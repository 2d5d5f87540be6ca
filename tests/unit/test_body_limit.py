"""The body-limit middleware in front of small applications, in process."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI
from pydantic import BaseModel
from starlette.types import ASGIApp, Receive, Scope, Send

from api.body_limit import BodyLimit, BodyLimitMiddleware, describe_size

LIMIT = BodyLimit(100, "body", "send less")


class CountingApp:
    """Reads the whole body and answers its length."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.calls += 1
        total = 0
        more = True
        while more:
            message = await receive()
            total += len(message.get("body", b""))
            more = message.get("more_body", False)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": str(total).encode()})


def client_of(app: ASGIApp) -> httpx.AsyncClient:
    limited = BodyLimitMiddleware(app, lambda _method, _path: LIMIT)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=limited), base_url="http://t")


class Pieces:
    """A streamed body of `count` pieces; `sent` says how many the server pulled."""

    def __init__(self, count: int, size: int) -> None:
        self.count, self.size, self.sent = count, size, 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for _ in range(self.count):
            self.sent += 1
            yield b"x" * self.size


async def test_a_body_of_exactly_the_limit_is_read() -> None:
    async with client_of(CountingApp()) as client:
        response = await client.post("/", content=b"x" * 100)
        assert (response.status_code, response.text) == (200, "100")
        streamed = await client.post("/", content=Pieces(4, 25))
        assert (streamed.status_code, streamed.text) == (200, "100")


async def test_a_declared_length_over_the_limit_is_refused_without_calling_the_app() -> None:
    app = CountingApp()
    async with client_of(app) as client:
        response = await client.post("/upload", content=b"x" * 101)
    assert response.status_code == 413
    assert response.headers["connection"] == "close"
    assert response.json() == {
        "error": "too_large",
        "detail": "the request body is 101 bytes, over the limit of 100 bytes for POST "
        "/upload; send less",
        "field": "body",
    }
    assert app.calls == 0


async def test_a_streamed_body_is_refused_as_it_passes_the_limit_unread_beyond() -> None:
    body = Pieces(50, 40)
    async with client_of(CountingApp()) as client:
        response = await client.post("/", content=body)
    assert response.status_code == 413
    assert "passed the limit of 100 bytes" in response.json()["detail"]
    assert body.sent == 3  # 120 bytes: the piece that passed the limit was the last read


class Named(BaseModel):
    name: str


async def test_a_framework_that_wraps_the_refusal_still_answers_413() -> None:
    app = FastAPI()

    @app.post("/named")
    async def named(body: Named) -> str:
        return body.name

    async with client_of(app) as client:
        response = await client.post("/named", content=Pieces(10, 40))
        assert response.status_code == 413, response.text
        assert response.json()["error"] == "too_large"
        small = await client.post("/named", json={"name": "ok"})
        assert small.json() == "ok"


async def test_an_application_error_within_the_limit_is_not_hidden() -> None:
    async def failing(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        raise RuntimeError("a bug")

    async with client_of(failing) as client:
        with pytest.raises(RuntimeError, match="a bug"):
            await client.post("/", content=b"small")


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (1024**2, "1 MiB (1048576 bytes)"),
        (5 * 1024**3, "5 GiB (5368709120 bytes)"),
        (64 * 1024, "64 KiB (65536 bytes)"),
        (1500, "1500 bytes"),
    ],
)
def test_sizes_are_described_in_units_and_bytes(size: int, text: str) -> None:
    assert describe_size(size) == text
