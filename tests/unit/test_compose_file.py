"""docker-compose.yml: valid YAML that wires every service by the DLAAS_* settings."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from storage.settings import Settings

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
