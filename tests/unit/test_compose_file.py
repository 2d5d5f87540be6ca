"""docker-compose.yml: valid YAML that wires every service by the DLAAS_* settings, and
ships no secret: each comes from .env (`dlaas secrets compose`) through `${VAR:?...}`."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from cli.secrets import COMPOSE_SECRETS
from lifecycle_manager.backends.local.node_agent import LEARNER_GRACE_S
from storage.connection_caps import total_connection_cap
from storage.settings import Settings
from tests.compose_file import (
    COMPOSE,
    REFERENCE,
    MissingVariable,
    generated_env,
    raw,
    services,
)
from tests.heartbeat_probe import (
    assert_beat_refreshes_its_heartbeat,
    assert_probe_tells_a_stale_heartbeat,
)
from tests.redis_bounds import maxmemory_of

# Environment keys that hold a secret, in the services' own images and in dlaas.
SECRET_KEYS = {
    "DLAAS_ADMIN_TOKEN",
    "DLAAS_POSTGRES_PASSWORD",
    "DLAAS_REDIS_PASSWORD",
    "DLAAS_S3_ACCESS_KEY",
    "DLAAS_S3_SECRET_KEY",
    "DLAAS_AGENT_TOKEN",
    "POSTGRES_PASSWORD",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "REDISCLI_AUTH",
}


HTTP_LIMIT_KEYS = {
    "DLAAS_HTTP_HEADER_TIMEOUT_S",
    "DLAAS_HTTP_BODY_TIMEOUT_S",
    "DLAAS_HTTP_MAX_CONNECTIONS_PER_ADDRESS",
    "DLAAS_HTTP_FD_HEADROOM",
}


def settings_of(service: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Settings:
    for key in [key for key in Settings.model_fields]:
        monkeypatch.delenv(f"DLAAS_{key.upper()}", raising=False)
    for key, value in service["environment"].items():
        monkeypatch.setenv(key, value)
    return Settings()


def test_every_service_is_there_and_the_environment_is_dlaas_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = generated_env()
    wired = services(env)
    assert {"api", "worker", "beat", "monitor", "postgres", "redis", "s3", "agent"} <= set(wired)
    assert wired["worker"]["command"][-1] == "--no-beat"
    assert wired["beat"]["command"][:4] == [
        "celery",
        "-A",
        "lifecycle_manager.entrypoints.celery_app:app",
        "beat",
    ]
    assert wired["api"]["build"]["target"] == "api"
    password = env["DLAAS_POSTGRES_PASSWORD"]
    for name in ("api", "worker", "beat", "monitor"):
        settings = settings_of(wired[name], monkeypatch)
        assert settings.database_url == (
            f"postgresql+asyncpg://dlaas:{password}@postgres:5432/dlaas"
        )
        assert settings.redis_url == f"redis://:{env['DLAAS_REDIS_PASSWORD']}@redis:6379/0"
        assert (settings.object_store, settings.s3_endpoint_url) == ("s3", "http://s3:8333")
        assert (settings.s3_access_key, settings.s3_secret_key) == (
            env["DLAAS_S3_ACCESS_KEY"],
            env["DLAAS_S3_SECRET_KEY"],
        )


def test_each_server_requires_the_secret_its_clients_are_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = generated_env()
    wired = services(env)
    assert wired["postgres"]["environment"]["POSTGRES_PASSWORD"] == env["DLAAS_POSTGRES_PASSWORD"]
    s3 = wired["s3"]["environment"]
    assert (s3["AWS_ACCESS_KEY_ID"], s3["AWS_SECRET_ACCESS_KEY"]) == (
        env["DLAAS_S3_ACCESS_KEY"],
        env["DLAAS_S3_SECRET_KEY"],
    )
    redis = wired["redis"]
    assert redis["environment"]["REDISCLI_AUTH"] == env["DLAAS_REDIS_PASSWORD"]
    script = redis["command"][-1]
    assert "requirepass $REDISCLI_AUTH" in script  # `$$` in the file: the shell's variable
    assert env["DLAAS_REDIS_PASSWORD"] not in " ".join(redis["command"])
    maxmemory, policy = maxmemory_of(script)
    assert policy == "noeviction" and maxmemory >= 256 * 1000**2
    assert wired["api"]["environment"]["DLAAS_ADMIN_TOKEN"] == env["DLAAS_ADMIN_TOKEN"]
    worker = settings_of(wired["worker"], monkeypatch)
    assert worker.agent_token == env["DLAAS_AGENT_TOKEN"]
    assert wired["agent"]["environment"]["DLAAS_AGENT_TOKEN"] == env["DLAAS_AGENT_TOKEN"]
    assert "DLAAS_AGENT_TOKEN" not in wired["api"]["environment"]


def test_the_agent_gets_no_database_or_storage_credentials_and_no_published_port(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = generated_env()
    wired = services(env)
    agent = wired["agent"]
    assert set(agent["environment"]) == {
        "DLAAS_REDIS_URL",
        "DLAAS_AGENT_TOKEN",
        "DLAAS_AGENT_BIND",
        "DLAAS_AGENT_ALLOWED_HOSTS",
        "DLAAS_AGENT_ISOLATION",
        "DLAAS_AGENT_STOP_LEARNERS_ON_EXIT",
        *HTTP_LIMIT_KEYS,
    }
    assert "ports" not in agent
    assert "--host" not in agent["command"]
    settings = settings_of(agent, monkeypatch)
    worker = settings_of(wired["worker"], monkeypatch)
    # The agent answers the name its clients use for it, on the port it listens on.
    agent_address = urlsplit(worker.agent_url)
    assert agent_address.hostname in settings.agent_allowed_hosts.split(",")
    assert str(agent_address.port) == agent["command"][agent["command"].index("--port") + 1]
    # Of every service, only the API publishes a port on the host.
    assert [name for name, service in wired.items() if "ports" in service] == ["api"]


def test_no_secret_is_written_in_the_file() -> None:
    text = COMPOSE.read_text()
    for default in ("change-me", "dlaas-secret", "POSTGRES_PASSWORD: dlaas", "e2e-admin"):
        assert default not in text
    for match in REFERENCE.finditer(text):
        if match["name"] in COMPOSE_SECRETS:
            assert match["op"] == ":?", f"{match[0]}: a secret has no default, and is not empty"
    written = raw()

    def secrets_in(value: Any, key: str = "") -> list[tuple[str, str]]:
        if isinstance(value, dict):
            return [found for k, item in value.items() for found in secrets_in(item, str(k))]
        if isinstance(value, list):
            return [found for item in value for found in secrets_in(item, key)]
        if key in SECRET_KEYS or (isinstance(value, str) and "://" in value and "@" in value):
            return [(key, str(value))]
        return []

    found = secrets_in(written["services"]) + secrets_in(
        {k: v for k, v in written.items() if k.startswith("x-")}
    )
    assert {key for key, _ in found} >= {"POSTGRES_PASSWORD", "DLAAS_ADMIN_TOKEN"}
    for key, value in found:
        references = [m for m in REFERENCE.finditer(value) if m["name"] in COMPOSE_SECRETS]
        assert references, f"{key}: {value!r} is not read from .env"
        assert all(m["op"] == ":?" for m in references), value


def test_without_its_secrets_compose_refuses_naming_the_command_that_writes_them() -> None:
    for name in COMPOSE_SECRETS:
        env = generated_env()
        for missing in ({k: v for k, v in env.items() if k != name}, {**env, name: ""}):
            with pytest.raises(MissingVariable, match=name) as refused:
                services(missing)
            assert "dlaas secrets compose" in str(refused.value)


def test_a_secrets_check_runs_before_any_server_starts() -> None:
    wired = services(generated_env())
    check = wired["secrets"]
    assert check["command"] == ["dlaas", "secrets", "check"]
    assert set(check["environment"]) == set(COMPOSE_SECRETS)
    for name in ("postgres", "redis", "s3"):
        assert wired[name]["depends_on"]["secrets"] == {
            "condition": "service_completed_successfully"
        }
    # Everything else waits on those servers (the API, and the agent on Redis).
    assert set(wired["api"]["depends_on"]) >= {"postgres", "redis", "s3"}
    assert "redis" in wired["agent"]["depends_on"]
    for name in ("worker", "beat", "monitor"):
        assert "api" in wired[name]["depends_on"]


@pytest.mark.parametrize("name", ["beat", "monitor"])
def test_beat_and_monitor_are_checked_on_their_heartbeat(name: str, tmp_path: Path) -> None:
    env = generated_env()
    service = services(env)[name]
    heartbeat = service["environment"]["DLAAS_LIVENESS_FILE"]
    redis_url = f"redis://:{env['DLAAS_REDIS_PASSWORD']}@redis:6379/0"
    assert service["environment"]["DLAAS_REDIS_URL"] == redis_url  # still dlaas's
    check = service["healthcheck"]["test"]
    assert check[0] == "CMD" and check[4] == heartbeat
    if name == "beat":
        assert_beat_refreshes_its_heartbeat(service["command"])
    assert_probe_tells_a_stale_heartbeat(check[1:], tmp_path)


def test_the_agent_runs_each_learners_program_as_a_uid_of_its_own() -> None:
    agent = raw()["services"]["agent"]
    assert agent["user"] == "0"
    assert agent["environment"]["DLAAS_AGENT_ISOLATION"] == "on"


def test_compose_down_stops_the_learners_before_what_their_checkpoints_need() -> None:
    """Compose stops a service before those it depends on: the agent depends on the API
    (its object gateway takes the stop checkpoints), the monitor and Redis, and stops its
    learners, giving them its grace, before its container's stop period runs out."""
    agent = raw()["services"]["agent"]
    assert {"api", "monitor", "redis"} <= set(agent["depends_on"])
    assert agent["environment"]["DLAAS_AGENT_STOP_LEARNERS_ON_EXIT"] == "true"
    stop_period_s = int(agent["stop_grace_period"].removesuffix("s"))
    assert "--grace" not in agent["command"]
    assert stop_period_s > LEARNER_GRACE_S, "the container would be killed before its learners"


@pytest.mark.parametrize("name", ["api", "agent"])
def test_the_servers_close_idle_connections_and_keep_their_connections_below_their_files(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = services(generated_env())[name]
    nofile = service["ulimits"]["nofile"]
    settings = settings_of(service, monkeypatch)
    assert set(service["environment"]) >= HTTP_LIMIT_KEYS
    assert (settings.http_header_timeout_s, settings.http_body_timeout_s) == (10, 30)
    assert settings.http_max_connections_per_address == 256
    # the connections the server may hold leave room for its database, Redis and files
    total = total_connection_cap(nofile["soft"], settings.http_fd_headroom)
    assert 20_000 < total <= nofile["soft"] - 512
    assert nofile["soft"] == nofile["hard"]
