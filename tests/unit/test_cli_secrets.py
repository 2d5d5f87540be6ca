"""`dlaas secrets compose` writes strong secrets to .env (0600); `dlaas secrets check`
refuses weak ones, naming each and the fix."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from cli.secrets import COMPOSE_SECRETS, MIN_LENGTH, read_env_file, weakness

runner = CliRunner()


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "docker-compose.yml").write_text("services: {}\n")
    return tmp_path


def test_it_writes_every_compose_secret_strong_random_and_private(folder: Path) -> None:
    done = runner.invoke(app, ["secrets", "compose", "--dir", str(folder), "-o", "json"])
    assert done.exit_code == 0, done.output
    answer = json.loads(done.stdout)
    assert answer["generated"] == list(COMPOSE_SECRETS) and answer["kept"] == []
    env_file = folder / ".env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    _lines, values = read_env_file(env_file)
    assert set(values) == set(COMPOSE_SECRETS)
    assert all(weakness(value) is None for value in values.values())
    assert len(set(values.values())) == len(values)  # each its own
    again = runner.invoke(app, ["secrets", "compose", "--dir", str(folder)])
    assert again.exit_code == 0, again.output
    assert read_env_file(env_file)[1] == values  # kept: a database was made with them
    assert "docker compose up" in again.stdout
    assert not [value for value in values.values() if value in again.stdout]  # never shown


def test_it_keeps_other_settings_and_adds_what_is_missing(folder: Path) -> None:
    strong = "s" * 10 + "0123456789abcdef0123456789abcdef"
    (folder / ".env").write_text(f"# mine\nCOMPOSE_PROJECT_NAME=dl\nDLAAS_ADMIN_TOKEN='{strong}'\n")
    (folder / ".env").chmod(0o644)  # as a person may have left it
    done = runner.invoke(app, ["secrets", "compose", "--dir", str(folder), "-o", "json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["kept"] == ["DLAAS_ADMIN_TOKEN"]
    lines, values = read_env_file(folder / ".env")
    assert lines[:3] == ["# mine", "COMPOSE_PROJECT_NAME=dl", f"DLAAS_ADMIN_TOKEN='{strong}'"]
    assert values["DLAAS_ADMIN_TOKEN"] == strong
    assert stat.S_IMODE((folder / ".env").stat().st_mode) == 0o600  # a new file, made so


def test_weak_values_already_there_are_refused_unless_replaced(folder: Path) -> None:
    (folder / ".env").write_text("DLAAS_POSTGRES_PASSWORD=dlaas\nDLAAS_ADMIN_TOKEN=short\n")
    refused = runner.invoke(app, ["secrets", "compose", "--dir", str(folder)])
    assert refused.exit_code == 2
    message = " ".join(refused.output.split())
    assert "DLAAS_POSTGRES_PASSWORD is a well-known default" in message
    assert f"DLAAS_ADMIN_TOKEN is shorter than {MIN_LENGTH} characters" in message
    assert "--replace-weak" in message
    replaced = runner.invoke(app, ["secrets", "compose", "--dir", str(folder), "--replace-weak"])
    assert replaced.exit_code == 0, replaced.output
    values = read_env_file(folder / ".env")[1]
    assert all(weakness(values[name]) is None for name in COMPOSE_SECRETS)
    assert (folder / ".env").read_text().count("DLAAS_POSTGRES_PASSWORD=") == 1


def test_it_runs_only_beside_a_compose_file(tmp_path: Path) -> None:
    refused = runner.invoke(app, ["secrets", "compose", "--dir", str(tmp_path)])
    assert refused.exit_code == 2
    assert "no docker-compose.yml" in refused.output
    assert not (tmp_path / ".env").exists()


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (None, "is missing"),
        ("", "is missing"),
        ("change-me-admin-token", "is a well-known default"),
        ("CHANGEME", "is a well-known default"),
        ("a" * (MIN_LENGTH - 1), f"is shorter than {MIN_LENGTH} characters"),
        ("a1" * (MIN_LENGTH // 2), None),
    ],
)
def test_what_makes_a_secret_weak(value: str | None, why: str | None) -> None:
    assert weakness(value) == why


def test_check_refuses_a_weak_or_missing_secret_naming_it_and_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    strong = {name: f"{name.lower()}-{'f' * 40}" for name in COMPOSE_SECRETS}
    for name, value in strong.items():
        monkeypatch.setenv(name, value)
    passed = runner.invoke(app, ["secrets", "check"])
    assert passed.exit_code == 0, passed.output
    monkeypatch.setenv("DLAAS_S3_SECRET_KEY", "dlaas-secret")
    monkeypatch.delenv("DLAAS_AGENT_TOKEN")
    refused = runner.invoke(app, ["secrets", "check"])
    assert refused.exit_code == 2
    message = " ".join(refused.output.split())
    assert "DLAAS_S3_SECRET_KEY (the S3 secret key) is a well-known default" in message
    assert "DLAAS_AGENT_TOKEN (the node agent's token) is missing" in message
    assert "dlaas secrets compose" in message and "openssl rand -hex 32" in message
    assert "DLAAS_ADMIN_TOKEN" not in message.split("refusing")[1].split(":")[0]
