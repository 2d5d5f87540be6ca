"""The CLI's POSTs carry an Idempotency-Key and are retried while the API is away.

Faults a live server cannot be made to show on cue (a timeout after the request was sent, a
broken connection) come from an httpx mock transport; the clock and sleeps are injected.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from cli.client import ApiError, DlaasClient, DlaasConnectionError

Handler = Callable[[httpx.Request], httpx.Response]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def client(handler: Handler, clock: Clock) -> DlaasClient:
    return DlaasClient(
        "http://dlaas",
        "token",
        transport=httpx.MockTransport(handler),
        sleep=clock.sleep,
        clock=lambda: clock.now,
    )


def files(tmp_path: Path) -> tuple[Path, Path]:
    manifest, model = tmp_path / "manifest.yml", tmp_path / "model.zip"
    manifest.write_text("name: x\nframework: {command: python t.py}\n")
    model.write_bytes(b"PK" + bytes(range(256)) * 64)
    return manifest, model


def test_a_submission_that_timed_out_is_sent_again_whole_with_the_same_key(
    tmp_path: Path,
) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        request.read()
        seen.append(request)
        if len(seen) == 1:
            raise httpx.ReadTimeout("no answer", request=request)
        if len(seen) == 2:
            return httpx.Response(503, json={"error": "unavailable", "detail": "restarting"})
        return httpx.Response(201, json={"id": "training-1"})

    clock = Clock()
    with client(handler, clock) as api:
        assert api.submit_job(*files(tmp_path)) == {"id": "training-1"}
    keys = {r.headers["Idempotency-Key"] for r in seen}
    assert len(seen) == 3 and len(keys) == 1 and len(keys.pop()) >= 24
    # Each retry carries the whole archive again (the multipart boundary differs).
    sizes = {len(r.content) for r in seen}
    assert max(sizes) - min(sizes) <= 64
    assert b"PK" + bytes(range(256)) in seen[2].content
    assert len(clock.sleeps) == 2


def test_each_post_has_its_own_key() -> None:
    keys: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        keys.append(request.headers["Idempotency-Key"])
        return httpx.Response(202, json={"id": "j"})

    with client(handler, Clock()) as api:
        api.halt_job("j")
        api.halt_job("j")
    assert len(set(keys)) == 2


def test_gets_carry_no_key() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert "Idempotency-Key" not in request.headers
        return httpx.Response(200, json={"id": "j"})

    with client(handler, Clock()) as api:
        api.get_job("j")


def test_a_refusal_is_not_retried() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(409, json={"error": "conflict", "detail": "not running"})

    with client(handler, Clock()) as api, pytest.raises(ApiError):
        api.resume_job("j")
    assert calls == 1


def test_nothing_listening_is_said_at_once() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    clock = Clock()
    with client(handler, clock) as api, pytest.raises(DlaasConnectionError) as error:
        api.halt_job("j")
    assert error.value.refused and clock.sleeps == []


def test_a_restart_is_ridden_out_for_retry_for_seconds_then_reported() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise httpx.RemoteProtocolError("connection closed", request=request)
        raise httpx.ConnectError("refused", request=request)  # restarting

    clock = Clock()
    with client(handler, clock) as api, pytest.raises(DlaasConnectionError):
        api.halt_job("j")
    assert 85.0 <= clock.now <= 90.0  # no pause would end past the 90 s
    assert calls > 10


def test_a_request_the_api_throttled_is_sent_again_after_retry_after() -> None:
    answers = [
        httpx.Response(
            429, json={"error": "rate_limited", "detail": "slow"}, headers={"Retry-After": "2"}
        ),
        httpx.Response(200, json={"id": "j", "state": "RUNNING"}),
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        return answers.pop(0)

    clock = Clock()
    with client(handler, clock) as api:
        assert api.get_job("j")["state"] == "RUNNING"
    assert clock.sleeps == [2.0]


def test_a_streamed_upload_is_not_sent_twice(tmp_path: Path) -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(429, json={"error": "rate_limited", "detail": "slow"})

    source = tmp_path / "data.bin"
    source.write_bytes(b"x" * 1000)
    with client(handler, Clock()) as api, pytest.raises(ApiError) as error:
        api.upload_data("c", "data.bin", source)
    assert error.value.status == 429 and calls == 1
