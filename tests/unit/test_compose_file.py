"""docker-compose.yml: valid YAML that wires every service by the DLAAS_* settings."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from storage.settings import Settings
from tests.heartbeat_probe import (
    assert_beat_refreshes_its_heartbeat,
    assert_probe_tells_a_stale_heartbeat,
)

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"


def test_every_service_is_there_and_the_environment_is_dlaas_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    assert {"api", "worker", "beat", "monitor", "postgres", "redis", "s3"} <= set(services)
    assert services["worker"]["command"][-1] == "--no-beat"
    assert services["beat"]["command"][:4] == [
        "celery",
        "-A",
        "lifecycle_manager.celery_app:app",
        "beat",
    ]
    assert services["api"]["build"]["target"] == "api"
    for name in ("api", "worker", "beat", "monitor"):
        for key, value in services[name]["environment"].items():
            monkeypatch.setenv(key, value)
        settings = Settings()
        assert settings.database_url.startswith("postgresql+asyncpg://dlaas:dlaas@postgres:5432/")
        assert settings.redis_url == "redis://redis:6379/0"
        assert (settings.object_store, settings.s3_endpoint_url) == ("s3", "http://s3:8333")


@pytest.mark.parametrize("name", ["beat", "monitor"])
def test_beat_and_monitor_are_checked_on_their_heartbeat(name: str, tmp_path: Path) -> None:
    service = yaml.safe_load(COMPOSE.read_text())["services"][name]
    heartbeat = service["environment"]["DLAAS_LIVENESS_FILE"]
    assert service["environment"]["DLAAS_REDIS_URL"] == "redis://redis:6379/0"  # still dlaas's
    check = service["healthcheck"]["test"]
    assert check[0] == "CMD" and check[4] == heartbeat
    if name == "beat":
        assert_beat_refreshes_its_heartbeat(service["command"])
    assert_probe_tells_a_stale_heartbeat(check[1:], tmp_path)
