"""The embedded platform's services: the command each runs with, and one restarted alone."""

from __future__ import annotations

import os
import secrets
import socket
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import redis
import redis.asyncio as aioredis

from cli import embedded
from cli.config import private_dir, write_private
from storage import job_credentials, job_key_bounds, job_redis_users, streams
from tests.services import free_port


def _record(home: Path) -> embedded.Platform:
    return embedded.Platform(
        home=str(home),
        url="http://127.0.0.1:18470",
        agent_url="http://127.0.0.1:18471",
        redis_url="redis://127.0.0.1:16479/0",
        pids={"api": 2**22 + 1},
    )


def test_each_service_runs_on_the_recorded_addresses(tmp_path: Path) -> None:
    record = _record(tmp_path)
    environ = {"PATH": "/usr/bin", "DLAAS_HOME": "/elsewhere"}
    argv, env = embedded.service_command(record, "api", token="t0ken", environ=environ)
    assert argv == [sys.executable, "-m", "api", "--port", "18470"]
    assert (env["DLAAS_HOME"], env["PATH"]) == (str(tmp_path), "/usr/bin")
    assert env["DLAAS_SETTINGS_FILE"] == str(tmp_path / "settings" / "api.json")
    assert embedded.service_settings(record, "api", token="t0ken") == {
        "redis_url": record.redis_url,
        "admin_token": "t0ken",
    }
    assert env["DLAAS_AGENT_URL"] == record.agent_url
    agent, _ = embedded.service_command(record, "agent", token="t", environ={})
    assert agent[-6:] == [
        "--host",
        "127.0.0.1",
        "--port",
        "18471",
        "--root",
        str(tmp_path / "agent"),
    ]
    redis, redis_env = embedded.service_command(record, "redis", token="t", environ={})
    assert redis[redis.index("--port") + 1] == "16479"
    assert redis[redis.index("--dir") + 1] == str(tmp_path / "redis")
    assert "DLAAS_ADMIN_TOKEN" not in redis_env and "DLAAS_SETTINGS_FILE" not in redis_env
    for name in ("worker", "monitor"):
        command, _ = embedded.service_command(record, name, token="t", environ={})
        assert command[-1] == f"lifecycle_manager.entrypoints.{name}"


def test_only_the_agent_and_the_lifecycle_manager_get_the_agents_token(tmp_path: Path) -> None:
    record = _record(tmp_path)
    # The caller's own secrets never override the platform's.
    environ = {"DLAAS_AGENT_TOKEN": "mine", "DLAAS_ADMIN_TOKEN": "mine-too"}
    for name in embedded.SERVICES:
        _argv, env = embedded.service_command(record, name, token="t0ken", environ=environ)
        assert "DLAAS_AGENT_TOKEN" not in env
        assert "DLAAS_ADMIN_TOKEN" not in env  # in the API's settings file
        admin = embedded.service_settings(record, name, token="t0ken").get("admin_token")
        assert admin == ("t0ken" if name == "api" else None)
        wanted = str(tmp_path / "agent-token") if name in ("agent", "worker", "monitor") else None
        assert env.get("DLAAS_AGENT_TOKEN_FILE") == wanted, name


def test_the_servers_take_the_callers_http_limits(tmp_path: Path) -> None:
    # `python -m api` and the node agent serve through storage.http_server, which reads these
    record = _record(tmp_path)
    environ = {"DLAAS_HTTP_HEADER_TIMEOUT_S": "5", "DLAAS_HTTP_MAX_CONNECTIONS_PER_ADDRESS": "64"}
    for name in ("api", "agent"):
        _argv, env = embedded.service_command(record, name, token="t0ken", environ=environ)
        assert environ.items() <= env.items(), name


def test_the_private_redis_requires_its_password_which_no_command_line_shows(
    tmp_path: Path,
) -> None:
    password = secrets.token_hex(32)
    record = _record(tmp_path)
    record.redis_url = f"redis://:{password}@127.0.0.1:{free_port()}/0"
    record.pids = {}
    record.save()
    private_dir(tmp_path / "logs")
    try:
        pid = embedded.start_service(tmp_path, "redis", environ={})  # waits until it answers
        with redis.Redis.from_url(record.redis_url) as client:
            assert client.ping()
        port = int(record.redis_url.rsplit(":", 1)[1].split("/")[0])
        assert _ask(port, b"PING").startswith(b"-NOAUTH")
        assert _ask(port, b"XADD dlaas:learner-events * forged 1").startswith(b"-NOAUTH")
        assert _ask(port, b"AUTH wrong-password").startswith(b"-WRONGPASS")
        assert _ask(port, b"AUTH " + password.encode(), b"PING") == b"+OK\r\n+PONG\r\n"
        assert password not in Path(f"/proc/{pid}/cmdline").read_text()
        config = tmp_path / "redis" / embedded.REDIS_CONFIG
        assert stat.S_IMODE(config.stat().st_mode) == 0o600
    finally:
        embedded.stop(tmp_path)


def test_a_service_reads_the_platforms_secrets_from_its_0600_file_not_its_environment(
    tmp_path: Path,
) -> None:
    """The node agent (which starts every job's runner) reaches the private Redis with the
    password from its settings file; its environment, which its children would inherit and
    `/proc/<pid>/environ` shows, holds none of it, nor does the caller's own Redis URL win."""
    password = secrets.token_hex(32)
    record = _record(tmp_path)
    record.redis_url = f"redis://:{password}@127.0.0.1:{free_port()}/0"
    record.agent_url = f"http://127.0.0.1:{free_port()}"
    record.pids = {}
    record.save()
    private_dir(tmp_path / "logs")
    write_private(record.agent_token_path, secrets.token_urlsafe(32) + "\n")
    environ = {**os.environ, "DLAAS_REDIS_URL": "redis://127.0.0.1:1/0"}
    try:
        embedded.start_service(tmp_path, "redis", environ={})
        agent = embedded.start_service(tmp_path, "agent", environ=environ)  # answers healthz
        settings_file = tmp_path / "settings" / "agent.json"
        assert stat.S_IMODE(settings_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(settings_file.parent.stat().st_mode) == 0o700
        seen = Path(f"/proc/{agent}/environ").read_bytes()
        assert password.encode() not in seen and b"DLAAS_REDIS_URL=" not in seen
        deadline = time.monotonic() + 30
        while "not reported" in embedded.job_isolation(record):  # its report, in Redis
            assert time.monotonic() < deadline, (tmp_path / "logs" / "agent.log").read_text()
            time.sleep(0.05)
    finally:
        embedded.stop(tmp_path)


def test_an_unknown_service_or_platform_is_named_in_the_error(tmp_path: Path) -> None:
    with pytest.raises(embedded.PlatformError, match="no service 'postgres'"):
        embedded.service_command(_record(tmp_path), "postgres", token="t", environ={})
    with pytest.raises(embedded.PlatformError, match="dlaas up"):
        embedded.start_service(tmp_path, "api")
    _record(tmp_path).save()
    with pytest.raises(embedded.PlatformError, match="runs no 'worker'"):
        embedded.stop_service(tmp_path, "worker")


def test_a_crashed_service_starts_again_as_before_with_its_new_pid_on_record(
    tmp_path: Path,
) -> None:
    record = _record(tmp_path)
    record.redis_url = f"redis://127.0.0.1:{free_port()}/0"
    record.pids = {}
    record.save()
    (tmp_path / "logs").mkdir()
    (tmp_path / "redis").mkdir()
    first = embedded.start_service(tmp_path, "redis", environ={})  # waits until it answers
    try:
        with pytest.raises(embedded.PlatformError, match="runs already"):
            embedded.start_service(tmp_path, "redis")
        second = embedded.restart_service(tmp_path, "redis", kill=True)
        assert second != first
        restarted = embedded.Platform.load(tmp_path)
        assert restarted is not None and restarted.alive() == {"redis": second}
        assert restarted.redis_url == record.redis_url
    finally:
        embedded.stop(tmp_path)


def _ask(port: int, *commands: bytes) -> bytes:
    """What Redis on `port` answers to `commands` (inline protocol) on one new connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(b"".join(command + b"\r\n" for command in commands))
        answer = b""
        while answer.count(b"\r\n") < len(commands):
            chunk = conn.recv(4096)
            if not chunk:
                break
            answer += chunk
        return answer


@pytest.mark.parametrize("with_token", [True, False], ids=["token", "agent-from-before-tokens"])
def test_dlaas_down_stops_the_learners_through_the_agent_with_its_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_token: bool
) -> None:
    record = _record(tmp_path)
    if with_token:
        write_private(record.agent_token_path, "a-token\n")
    sent: list[tuple[str, str, dict[str, str]]] = []
    listed = {"learners": [{"job": "j1", "phase": "Running"}, {"job": "j2", "phase": "Failed"}]}

    def answer(method: str) -> Callable[..., httpx.Response]:
        def call(url: str, *, headers: dict[str, str], **_: object) -> httpx.Response:
            sent.append((method, url, headers))
            return httpx.Response(200, json=listed if method == "GET" else {"gone": True})

        return call

    monkeypatch.setattr(httpx, "get", answer("GET"))
    monkeypatch.setattr(httpx, "delete", answer("DELETE"))
    assert embedded.stop_learners(record, wait_s=1) == ["j1"]
    expected = {"Authorization": "Bearer a-token"} if with_token else {}
    assert sent == [
        ("GET", f"{record.agent_url}/learners", expected),
        ("DELETE", f"{record.agent_url}/jobs/j1", expected),
    ]


async def test_a_job_writing_past_its_bound_grows_redis_past_neither_bound(
    tmp_path: Path,
) -> None:
    """The embedded Redis holds at most its maxmemory and evicts nothing to make room: a job
    whose user adds without MAXLEN is refused there, the platform's keys stay, and the
    monitor's pass (`job_key_bounds.abound_jobs`) gives the room back."""
    maxmemory = 160 * 1000**2
    record = _record(tmp_path)
    record.redis_url = f"redis://:{secrets.token_hex(16)}@127.0.0.1:{free_port()}/0"
    record.pids = {}
    record.save()
    private_dir(tmp_path / "logs")
    embedded.start_service(tmp_path, "redis", environ={"DLAAS_REDIS_MAXMEMORY": str(maxmemory)})
    platform = aioredis.Redis.from_url(record.redis_url)
    job_id, token = "training-flooder", "dlaasjob_" + secrets.token_hex(16)
    try:
        assert await platform.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
        await platform.lpush("celery", b"a broker message")
        await job_redis_users.agrant(platform, job_id, [job_credentials.hash_job_token(token)])
        job = redis.Redis.from_url(job_redis_users.learner_url(record.redis_url, job_id, token))
        entry = {"lines": "x" * 64 * 1024}
        written = 0
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            for _ in range(2 * maxmemory // len(entry["lines"])):  # twice what Redis may hold
                job.xadd(streams.logs_key(job_id), entry)  # no MAXLEN
                written += 1
        job.close()
        used = (await platform.info("memory"))["used_memory"]
        assert written * 64 * 1024 < 1.1 * maxmemory and used < 1.1 * maxmemory
        assert await platform.lrange("celery", 0, -1) == [b"a broker message"]  # not evicted
        deleted = await job_key_bounds.abound_jobs(platform, [job_id])
        assert deleted == {job_id: [streams.logs_key(job_id)]}
        used = (await platform.info("memory"))["used_memory"]
        assert used < job_key_bounds.LOGS_MAX_BYTES, used
        await platform.lpush("celery", b"the platform writes again")
    finally:
        await platform.aclose()
        embedded.stop(tmp_path)
