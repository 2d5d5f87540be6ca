"""What `dlaas up` keeps to its owner: DLAAS_HOME, the files holding secrets, its Redis and
its node agent (started under umask 022, with which an unguarded file would be 0644)."""

from __future__ import annotations

import socket
import stat
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import redis

from tests.e2e.conftest import Platform

pytestmark = pytest.mark.e2e


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_home_and_every_file_holding_a_secret_are_the_owners_alone(
    platform: Platform,
) -> None:
    home = platform.home
    assert mode(home) == 0o700
    for secret in ("client.json", "platform.json", "agent-token", "redis/redis.conf"):
        assert mode(home / secret) == 0o600, secret
    assert mode(home / "settings") == 0o700
    for service in ("api", "agent", "worker", "monitor"):
        assert mode(home / "settings" / f"{service}.json") == 0o600, service
    assert mode(home / "logs") == 0o700
    logs = list((home / "logs").glob("*.log"))
    assert {path.name for path in logs} >= {"api.log", "agent.log", "redis.log", "worker.log"}
    assert all(mode(path) == 0o600 for path in logs)


def test_its_redis_refuses_a_client_without_the_password(platform: Platform) -> None:
    url = urlsplit(platform.record().redis_url)
    assert url.password and len(url.password) >= 32
    assert url.hostname is not None and url.port is not None
    with socket.create_connection((url.hostname, url.port), timeout=5) as conn:
        conn.sendall(b"KEYS *\r\n")
        assert conn.recv(1024).startswith(b"-NOAUTH")
    with redis.Redis.from_url(platform.record().redis_url) as client:
        assert client.ping()


def test_no_command_line_or_service_log_shows_the_platforms_secrets(platform: Platform) -> None:
    record = platform.record()
    secrets = [urlsplit(record.redis_url).password or "", record.agent_headers()["Authorization"]]
    secrets.append(platform.token)
    secrets = [secret.removeprefix("Bearer ") for secret in secrets]
    for name, pid in record.pids.items():
        command_line = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        assert not [s for s in secrets if s in command_line], name
    for log in (platform.home / "logs").glob("*.log"):
        text = log.read_text(errors="replace")
        assert not [s for s in secrets if s in text], log.name


def test_no_services_environment_holds_the_platforms_secrets(platform: Platform) -> None:
    """A service's environment is inherited by what it starts (the node agent starts every
    job's runner) and shown in /proc/<pid>/environ: the secrets are in 0600 files."""
    record = platform.record()
    secrets = [urlsplit(record.redis_url).password or "", platform.token]
    secrets.append(record.agent_headers()["Authorization"].removeprefix("Bearer "))
    for name, pid in record.pids.items():
        environ = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
        assert not [s for s in secrets if s in environ], name


def test_its_node_agent_answers_only_its_token_on_its_own_address(platform: Platform) -> None:
    record = platform.record()
    assert urlsplit(record.agent_url).hostname == "127.0.0.1"
    assert httpx.get(f"{record.agent_url}/learners", timeout=10).status_code == 401
    forged = {**record.agent_headers(), "Host": "rebound.example"}
    assert httpx.get(f"{record.agent_url}/learners", headers=forged, timeout=10).status_code == 421
    answer = httpx.get(f"{record.agent_url}/learners", headers=record.agent_headers(), timeout=10)
    assert answer.status_code == 200
