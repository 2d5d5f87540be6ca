"""DLAAS_HOME and the files holding secrets are the owner's alone from the moment they exist.

Run under umask 022, the usual one, with which a plain `write_text` gives 0644.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli import embedded
from cli.config import private_dir, write_private


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.fixture(autouse=True)
def no_chmod(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mode set after creation would leave a moment when others could read the file."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"chmod{args}: files must be created with their mode")

    monkeypatch.setattr(os, "chmod", refuse)
    monkeypatch.setattr(Path, "chmod", refuse)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_a_private_directory_is_created_0700(tmp_path: Path) -> None:
    home = private_dir(tmp_path / "a" / "home")
    assert mode(home) == 0o700
    assert private_dir(home) == home  # already there: left as it is


def test_a_private_file_is_0600_with_its_whole_text_before_it_takes_the_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "client.json"
    target.write_text("old")  # 0644, as an older dlaas left it
    seen: list[tuple[int, str]] = []
    replace = os.replace

    def spy(source: str | os.PathLike[str], destination: str | os.PathLike[str]) -> None:
        seen.append((mode(Path(source)), Path(source).read_text()))
        replace(source, destination)

    monkeypatch.setattr(os, "replace", spy)
    write_private(target, '{"token": "secret"}')
    assert seen == [(0o600, '{"token": "secret"}')]
    assert mode(target) == 0o600
    assert target.read_text() == '{"token": "secret"}'
    assert [p.name for p in tmp_path.iterdir()] == ["client.json"]  # no temporary file left


def test_a_failed_write_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(*_args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        write_private(tmp_path / "platform.json", "{}")
    assert list(tmp_path.iterdir()) == []


def test_the_platform_record_and_the_agents_token_are_private(tmp_path: Path) -> None:
    record = embedded.Platform(
        home=str(tmp_path),
        url="http://127.0.0.1:1",
        agent_url="http://127.0.0.1:2",
        redis_url="redis://:password@127.0.0.1:3/0",
    )
    record.save()
    assert mode(record.record_path) == 0o600
    write_private(record.agent_token_path, "token\n")
    assert record.agent_headers() == {"Authorization": "Bearer token"}


def test_a_home_an_older_dlaas_left_open_is_made_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.undo()  # the home's own mode is narrowed: a directory, never a secret file
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    steps: list[str] = []
    embedded._own_home(home, steps.append)
    assert mode(home) == 0o700
    assert steps == [f"made {home} private to its owner (it was 755, now 700)"]
    steps.clear()
    embedded._own_home(home, steps.append)
    assert steps == []
