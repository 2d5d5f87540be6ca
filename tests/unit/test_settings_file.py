"""A service's secret settings from a file (`DLAAS_SETTINGS_FILE`), under its environment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from storage.settings import Settings


def test_settings_come_from_the_file_and_the_environment_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "api.json"
    path.write_text(json.dumps({"redis_url": "redis://:pw@r:6379/1", "admin_token": "t0ken"}))
    monkeypatch.delenv("DLAAS_REDIS_URL", raising=False)
    monkeypatch.delenv("DLAAS_ADMIN_TOKEN", raising=False)
    monkeypatch.setenv("DLAAS_SETTINGS_FILE", str(path))
    settings = Settings()
    assert (settings.redis_url, settings.admin_token) == ("redis://:pw@r:6379/1", "t0ken")
    monkeypatch.setenv("DLAAS_ADMIN_TOKEN", "from-env")
    assert Settings().admin_token == "from-env"


def test_a_settings_file_that_is_not_there_is_named_in_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLAAS_SETTINGS_FILE", str(tmp_path / "missing.json"))
    with pytest.raises(ValueError, match=r"DLAAS_SETTINGS_FILE=.*missing\.json"):
        Settings()
