"""Every request body has a limit, enforced by the API served over a real socket.

The raw HTTP exchanges here send exactly the bytes a test names and then read the answer to
the end, so they show what the server answers before (or instead of) reading a body.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.app import JSON_BODY_LIMIT, SUBMIT_FORM_OVERHEAD
from api.manifest import MAX_MANIFEST_BYTES
from tests.integration.api_harness import ADMIN_TOKEN, MANIFEST, MODEL_ZIP, running_api, served

MiB = 1024**2
ANSWER_TIMEOUT_S = 30.0  # a bound on a hang, not a wait: answers come in milliseconds


@dataclass
class Served:
    port: int
    limits: dict[str, int]  # of JSON routes, data uploads and job submissions


@pytest.fixture
async def api_server(tmp_path: Path, redis_url: str, postgres_url: str) -> AsyncIterator[Served]:
    async with running_api(postgres_url, redis_url, tmp_path / "objects") as harness:
        state = harness.app.state.dlaas
        async with served(harness.app) as port:
            yield Served(
                port=port,
                limits={
                    "json": JSON_BODY_LIMIT.max_bytes,
                    "data": harness.settings.max_data_upload_bytes,
                    "submit": state.archive_limits.max_bytes
                    + MAX_MANIFEST_BYTES
                    + SUBMIT_FORM_OVERHEAD,
                },
            )


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


async def exchange(port: int, head: str, body_parts: Iterable[bytes] = ()) -> Answer:
    """Send `head` (request line and headers) and `body_parts`, then read until the server
    closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head.encode() + b"\r\n")
        for part in body_parts:
            writer.write(part)
            await writer.drain()
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), ANSWER_TIMEOUT_S)
    finally:
        writer.close()
    head_bytes, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head_bytes.decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in header_lines)
    return Answer(status=int(status_line.split()[1]), headers=headers, body=body)


def request_head(method: str, path: str, *headers: str) -> str:
    lines = [
        f"{method} {path} HTTP/1.1",
        "Host: dlaas",
        f"Authorization: Bearer {ADMIN_TOKEN}",
        *headers,
    ]
    return "".join(line + "\r\n" for line in lines)


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def assert_refused(answer: Answer, limit: int, field: str) -> None:
    assert answer.status == 413, answer
    assert answer.headers["connection"] == "close"
    body = answer.json()
    assert body["error"] == "too_large"
    assert body["field"] == field
    assert f"{limit} bytes" in body["detail"], body


@pytest.mark.parametrize(
    ("method", "path", "content_type", "kind", "field"),
    [
        ("POST", "/v2/users", "application/json", "json", "body"),
        ("GET", "/healthz", "application/json", "json", "body"),
        ("PUT", "/v2/data/corpus/train.csv", "application/octet-stream", "data", "body"),
        ("POST", "/v2/jobs", "multipart/form-data; boundary=x", "submit", "model"),
    ],
)
async def test_a_content_length_over_the_limit_is_refused_before_the_body_is_sent(
    api_server: Served, method: str, path: str, content_type: str, kind: str, field: str
) -> None:
    limit = api_server.limits[kind]
    head = request_head(
        method, path, f"Content-Type: {content_type}", f"Content-Length: {limit + 1}"
    )
    # no body follows the headers: the answer, and the end of the connection, come anyway
    answer = await exchange(api_server.port, head)
    assert_refused(answer, limit, field)
    assert f"is {limit + 1} bytes" in answer.json()["detail"]


async def test_a_chunked_body_is_refused_once_it_passes_the_limit(api_server: Served) -> None:
    head = request_head(
        "POST", "/v2/users", "Content-Type: application/json", "Transfer-Encoding: chunked"
    )
    piece = b" " * (64 * 1024)
    parts = [chunk(b'{"name": "big"}'), *(chunk(piece) for _ in range(16))]
    # the chunk that passes 1 MiB is the last one sent; the body is never ended
    answer = await exchange(api_server.port, head, parts)
    assert_refused(answer, JSON_BODY_LIMIT.max_bytes, "body")
    assert "passed the limit of 1 MiB" in answer.json()["detail"]


async def test_a_chunked_data_upload_is_counted_as_it_arrives(api_server: Served) -> None:
    head = request_head("PUT", "/v2/data/corpus/part.bin", "Transfer-Encoding: chunked")
    parts = [chunk(b"x" * 1000), chunk(b"y" * 24), b"0\r\n\r\n"]
    answer = await exchange(api_server.port, head + "Connection: close\r\n", parts)
    assert answer.status == 201, answer
    assert answer.json()["size"] == 1024


async def test_bodies_within_their_limits_are_served(api_server: Served) -> None:
    base_url = f"http://127.0.0.1:{api_server.port}"
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers) as client:
        name = f"padded-{secrets.token_hex(4)}"
        document = json.dumps({"name": name}).encode()
        exactly_the_limit = document + b" " * (JSON_BODY_LIMIT.max_bytes - len(document))
        created = await client.post(
            "/v2/users", content=exactly_the_limit, headers={"Content-Type": "application/json"}
        )
        assert created.status_code == 201, created.text

        async def streamed() -> AsyncIterator[bytes]:
            for _ in range(4):
                yield b"z" * MiB

        uploaded = await client.put("/v2/data/corpus/streamed.bin", content=streamed())
        assert uploaded.status_code == 201, uploaded.text
        assert uploaded.json()["size"] == 4 * MiB

        submitted = await client.post(
            "/v2/jobs",
            files={
                "manifest": ("manifest.yml", MANIFEST, "application/x-yaml"),
                "model": ("model.zip", MODEL_ZIP, "application/zip"),
            },
        )
        assert submitted.status_code == 201, submitted.text


async def test_an_ordinary_client_sending_too_much_is_told_why(api_server: Served) -> None:
    base_url = f"http://127.0.0.1:{api_server.port}"
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers) as client:
        response = await client.post("/v2/users", content=b" " * (2 * MiB))
    assert response.status_code == 413
    assert response.json()["error"] == "too_large"
