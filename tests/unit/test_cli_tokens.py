"""`dlaas token`'s own rules: durations, default names, and token files only their owner
reads."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from api.schemas import NAME
from cli.context import Invocation
from cli.errors import CliError
from cli.tokens import default_token_name, hand_out_token, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("45s", 45), ("90m", 5400), ("12h", 43200), ("30d", 2592000), ("2w", 1209600), ("1D", 86400)],
)
def test_durations_read_as_seconds(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "30", "d", "-1d", "1.5h", "30 days", "1y"])
def test_a_duration_that_is_not_one_names_the_option(text: str) -> None:
    with pytest.raises(CliError) as refusal:
        parse_duration(text)
    assert "--expires-in" in refusal.value.message and "30d" in refusal.value.message


@pytest.mark.parametrize("text", ["0s", "0d", "000h"])
def test_a_zero_duration_is_refused_as_zero_not_as_no_duration(text: str) -> None:
    with pytest.raises(CliError) as refusal:
        parse_duration(text)
    message = refusal.value.message
    assert "is not a duration" not in message, message
    assert "above zero" in message and "--expires-in" in message


def test_the_default_name_is_a_valid_name() -> None:
    name = default_token_name(datetime(2026, 11, 26, 12, 0, 5, tzinfo=UTC))
    assert name == "token-20261126-120005" and NAME.fullmatch(name)


def test_a_token_file_is_created_for_its_owner_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "ci.token"
    old = os.umask(0o022)
    try:
        hand_out_token(Invocation(), {"token": "dlaas_secret", "name": "ci"}, target)
    finally:
        os.umask(old)
    assert capsys.readouterr().out == "dlaas_secret\n"
    assert target.read_text() == "dlaas_secret\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
