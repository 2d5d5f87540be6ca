"""Where the CLI finds its server and token: options, then environment, then client.json."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.config import DEFAULT_URL, ConfigError, resolve_config
from tests.unit.test_cli_stub_api import TOKEN, StubServer, invoke, running_stub


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("DLAAS_HOME", str(home))
    monkeypatch.delenv("DLAAS_URL", raising=False)
    monkeypatch.delenv("DLAAS_TOKEN", raising=False)
    return home


@pytest.fixture
def stub() -> Iterator[StubServer]:
    with running_stub() as server:
        yield server


def write_client_file(home: Path, url: str, token: str) -> None:
    (home / "client.json").write_text(json.dumps({"url": url, "token": token}))


def test_defaults_without_any_configuration(home: Path) -> None:
    config = resolve_config(env={"DLAAS_HOME": str(home)})
    assert config.url == DEFAULT_URL
    assert config.token is None
    assert config.url_source == "default"


def test_each_field_takes_the_first_source_that_sets_it(home: Path) -> None:
    write_client_file(home, "http://file:1", "file-token")
    env = {"DLAAS_HOME": str(home), "DLAAS_URL": "http://env:2/"}
    config = resolve_config(env=env)
    assert (config.url, config.token) == ("http://env:2", "file-token")
    assert config.url_source == "DLAAS_URL"
    assert config.token_source == str(home / "client.json")

    env["DLAAS_TOKEN"] = "env-token"
    config = resolve_config(url="http://option:3", env=env)
    assert (config.url, config.token) == ("http://option:3", "env-token")

    config = resolve_config(url="http://option:3", token="option-token", env=env)
    assert config.token == "option-token"
    assert config.token_source == "--token"


def test_dlaas_home_defaults_to_dot_dlaas(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".dlaas").mkdir()
    write_client_file(tmp_path / ".dlaas", "http://saved:9", "saved")
    config = resolve_config(env={})
    assert (config.url, config.token) == ("http://saved:9", "saved")


def test_a_broken_client_file_says_how_to_fix_it(home: Path) -> None:
    (home / "client.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"client.json is not valid JSON.*dlaas up"):
        resolve_config(env={"DLAAS_HOME": str(home)})


def test_a_url_without_scheme_is_refused(home: Path) -> None:
    with pytest.raises(ConfigError, match="must start with http"):
        resolve_config(url="127.0.0.1:8470", env={"DLAAS_HOME": str(home)})


def test_cli_reads_client_file(home: Path, stub: StubServer) -> None:
    write_client_file(home, stub.url, TOKEN)
    result = invoke(None, "list", "--output", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"jobs": [], "next": None}


def test_cli_environment_beats_client_file(
    home: Path, stub: StubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_client_file(home, "http://127.0.0.1:9", "wrong-token")
    monkeypatch.setenv("DLAAS_URL", stub.url)
    monkeypatch.setenv("DLAAS_TOKEN", TOKEN)
    result = invoke(None, "list", "-o", "json")
    assert result.exit_code == 0, result.output


def test_cli_options_beat_environment(
    home: Path, stub: StubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLAAS_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("DLAAS_TOKEN", "wrong-token")
    before = invoke(None, "--url", stub.url, "list")
    assert before.exit_code == 1
    assert "authentication failed" in before.stderr
    after = invoke(None, "list", "--url", stub.url, "--token", TOKEN, "-o", "json")
    assert after.exit_code == 0, after.output


def test_cli_reports_a_broken_client_file_in_one_line(home: Path) -> None:
    (home / "client.json").write_text("[1, 2")
    result = invoke(None, "list")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert "client.json is not valid JSON" in result.stderr
    assert "Traceback" not in result.output
