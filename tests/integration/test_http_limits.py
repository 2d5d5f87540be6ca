"""The API's HTTP server closes connections that hold it without sending requests, and keeps
answering others: read timeouts and connection caps, against `python -m api` on a free port.

Client addresses other than 127.0.0.1 are other loopback addresses (127.0.0.0/8), so one
test plays several clients.
"""

from __future__ import annotations

import contextlib
import select
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.settings import Settings
from tests import services
from tests.integration.api_harness import ADMIN_TOKEN

HEADER_TIMEOUT_S = 1.5
BODY_TIMEOUT_S = 1.5
# A busy 2-core machine may run a timer late; never this late.
LATE_S = 10.0
PARTIAL_HEAD = b"GET /healthz HTTP/1.1\r\nHost: dlaas\r\n"


def _api(tmp_path: Path, redis_url: str, **limits: float) -> Iterator[str]:
    settings = Settings(
        home=tmp_path / "home",
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'api.db'}",
        redis_url=redis_url,
        objects_dir=tmp_path / "objects",
        admin_token=ADMIN_TOKEN,
        **limits,  # type: ignore[arg-type]
    )
    process = services.start_gateway_api(settings, tmp_path / "api")
    try:
        yield settings.api_url
    finally:
        process.stop()


@pytest.fixture
def short_timeouts_api(tmp_path: Path, redis_url: str) -> Iterator[str]:
    yield from _api(
        tmp_path,
        redis_url,
        http_header_timeout_s=HEADER_TIMEOUT_S,
        http_body_timeout_s=BODY_TIMEOUT_S,
    )


@pytest.fixture
def capped_api(tmp_path: Path, redis_url: str) -> Iterator[str]:
    # Timeouts far beyond the test, so that only a cap closes a connection.
    yield from _api(
        tmp_path,
        redis_url,
        http_header_timeout_s=300,
        http_max_connections_per_address=4,
        http_max_connections=8,
    )


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _connect(url: str, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(
        ("127.0.0.1", _port(url)), timeout=LATE_S, source_address=(source, 0)
    )


def _read_until_closed(sock: socket.socket, timeout_s: float) -> bytes:
    """Everything the server sends until it closes the connection (or resets it)."""
    sock.settimeout(timeout_s)
    received = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            received += chunk
    return received


def _is_open(sock: socket.socket) -> bool:
    """The server has neither closed nor reset `sock` (nothing to read yet)."""
    readable, _, _ = select.select([sock], [], [], 0)
    return not readable


def _healthz(url: str) -> int:
    with urllib.request.urlopen(url + "/healthz", timeout=LATE_S) as answer:
        return int(answer.status)


def test_a_head_still_incomplete_after_the_header_timeout_is_closed_though_it_trickles(
    short_timeouts_api: str,
) -> None:
    with _connect(short_timeouts_api) as sock:
        sock.sendall(PARTIAL_HEAD)
        started = time.monotonic()
        closed_after = None
        # A header line every 0.3 s: bytes keep coming, the head never ends.
        while closed_after is None and time.monotonic() - started < HEADER_TIMEOUT_S + LATE_S:
            readable, _, _ = select.select([sock], [], [], 0.3)
            if readable:
                assert _read_until_closed(sock, LATE_S) == b""
                closed_after = time.monotonic() - started
            else:
                with contextlib.suppress(OSError):
                    sock.sendall(b"X-Trickle: 1\r\n")
    assert closed_after is not None, "the server kept a trickling incomplete head open"
    assert HEADER_TIMEOUT_S * 0.9 <= closed_after < HEADER_TIMEOUT_S + LATE_S
    assert _healthz(short_timeouts_api) == 200


def _body_request(length: int) -> bytes:
    return (
        f"POST /v2/teams HTTP/1.1\r\nHost: dlaas\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def test_a_body_that_stops_coming_is_closed_after_the_body_timeout(
    short_timeouts_api: str,
) -> None:
    body = b'{"name": "slow-body-team"}'
    with _connect(short_timeouts_api) as sock:
        sock.sendall(_body_request(len(body)) + body[:5])
        started = time.monotonic()
        answer = _read_until_closed(sock, BODY_TIMEOUT_S + LATE_S)
        closed_after = time.monotonic() - started
    assert answer == b"", "the request was answered: the body was not waited for"
    assert BODY_TIMEOUT_S * 0.9 <= closed_after < BODY_TIMEOUT_S + LATE_S


def test_a_body_that_keeps_coming_within_the_timeout_is_read_to_its_end(
    short_timeouts_api: str,
) -> None:
    body = b'{"name": "trickled-team"}'
    chunks = [body[i : i + 3] for i in range(0, len(body), 3)]
    with _connect(short_timeouts_api) as sock:
        sock.sendall(_body_request(len(body)))
        started = time.monotonic()
        for chunk in chunks:  # 9 chunks 0.4 s apart: 3.6 s in all, past the timeout
            time.sleep(0.4)
            sock.sendall(chunk)
        assert time.monotonic() - started > BODY_TIMEOUT_S
        sock.settimeout(LATE_S)
        head = sock.recv(65536)
    assert head.startswith(b"HTTP/1.1 201"), head[:200]


def test_connections_over_the_cap_of_one_address_are_refused_while_others_are_answered(
    capped_api: str,
) -> None:
    held = [_connect(capped_api, "127.0.0.2") for _ in range(4)]
    try:
        for sock in held:
            sock.sendall(PARTIAL_HEAD)
        started = time.monotonic()
        with _connect(capped_api, "127.0.0.2") as over:
            assert _read_until_closed(over, LATE_S) == b""
        # refused at once: long before any timeout could have closed it
        assert time.monotonic() - started < LATE_S
        assert _healthz(capped_api) == 200
        assert all(_is_open(sock) for sock in held)
    finally:
        for sock in held:
            sock.close()


def test_at_the_total_cap_the_connection_waiting_longest_for_a_head_makes_room(
    capped_api: str,
) -> None:
    held = [_connect(capped_api, source) for source in ["127.0.0.3"] * 4 + ["127.0.0.4"] * 4]
    try:
        for sock in held:
            sock.sendall(PARTIAL_HEAD)
        # the ninth connection: /healthz is answered in the place of the oldest idle one
        assert _healthz(capped_api) == 200
        assert _read_until_closed(held[0], LATE_S) == b""
        assert all(_is_open(sock) for sock in held[1:])
    finally:
        for sock in held:
            sock.close()
