"""`dlaas ui`: the dashboard's sign-in link, opened in a browser or printed."""

from __future__ import annotations

import json
import webbrowser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from cli.ui import sign_in_link


@pytest.fixture
def configured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("DLAAS_HOME", str(tmp_path))
    monkeypatch.delenv("DLAAS_URL", raising=False)
    monkeypatch.delenv("DLAAS_TOKEN", raising=False)
    token = "dlaas_a/b+c=d"
    (tmp_path / "client.json").write_text(json.dumps({"url": "http://h:1/", "token": token}))
    return token


def test_the_link_carries_the_token_in_its_fragment_escaped() -> None:
    link = sign_in_link("http://127.0.0.1:8080/", "dlaas_a/b+c=d")
    assert link == "http://127.0.0.1:8080/ui/#token=dlaas_a%2Fb%2Bc%3Dd"


def test_ui_opens_the_link_in_a_browser(configured: str, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []
    monkeypatch.setattr(webbrowser, "open", lambda url: opened.append(url) or True)
    result = CliRunner().invoke(app, ["ui"])
    assert result.exit_code == 0, result.output
    assert opened == [sign_in_link("http://h:1", configured)]
    assert opened[0] in result.output


def test_without_a_browser_the_link_is_printed_saying_so(
    configured: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(webbrowser, "open", lambda url: False)
    result = CliRunner().invoke(app, ["ui"])
    assert result.exit_code == 0
    assert "no browser could be opened here" in result.output
    assert sign_in_link("http://h:1", configured) in result.output


def test_print_only_never_opens_a_browser(configured: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(webbrowser, "open", lambda url: pytest.fail("a browser was opened"))
    result = CliRunner().invoke(app, ["-o", "json", "ui", "--print"])
    assert json.loads(result.output) == {
        "url": sign_in_link("http://h:1", configured),
        "opened": False,
    }


def test_without_a_token_it_says_where_to_get_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLAAS_HOME", str(tmp_path))
    monkeypatch.delenv("DLAAS_TOKEN", raising=False)
    result = CliRunner().invoke(app, ["ui", "--print"])
    assert result.exit_code != 0
    assert "no API token" in result.output and "dlaas up" in result.output
