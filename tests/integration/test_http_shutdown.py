"""On SIGTERM the HTTP server stops within its grace even while a response streams without
end, as a followed log does: `storage.http_server.serve` in a process of its own, on a
free port, with an application that streams a line a second for ever, and a grace of 2 s
(`DLAAS_HTTP_SHUTDOWN_GRACE_S`)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

SHUTDOWN_GRACE_S = 2
# A busy 2-core machine may start or stop a process late; never this late.
LATE_S = 5.0
ROOT = Path(__file__).resolve().parents[2]


async def streams_for_ever(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    while True:
        await send({"type": "http.response.body", "body": b"line\n", "more_body": True})
        await asyncio.sleep(1.0)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_until_listening(server: subprocess.Popen[bytes], port: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        assert server.poll() is None, "the server exited"
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.1)


def test_a_response_that_never_ends_does_not_hold_the_server_past_its_grace() -> None:
    port = _free_port()
    code = (
        "from storage.http_server import serve; "
        f"serve('tests.integration.test_http_shutdown:streams_for_ever', host='127.0.0.1', "
        f"port={port}, access_log=False, log_level='warning')"
    )
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": str(ROOT),
        "DLAAS_HTTP_SHUTDOWN_GRACE_S": str(SHUTDOWN_GRACE_S),
    }
    server = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env)
    try:
        _wait_until_listening(server, port)
        with (
            httpx.Client(timeout=30) as client,
            client.stream("GET", f"http://127.0.0.1:{port}/") as response,
        ):
            assert next(response.iter_lines()) == "line"
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=SHUTDOWN_GRACE_S + LATE_S)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
