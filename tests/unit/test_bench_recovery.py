"""bench/recovery.py says when a run made fewer kills than its figures need."""

from __future__ import annotations

from typing import Any

import pytest

from bench import recovery


def test_a_run_with_enough_kills_meets_the_target(capsys: pytest.CaptureFixture[str]) -> None:
    figures: dict[str, Any] = {"kills": 12}
    recovery.check_kills(figures)
    assert figures["kills_required"] == 10
    assert figures["kills_target_met"] is True
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("figures", [{"kills": 4}, {}], ids=["short", "none-recorded"])
def test_a_short_run_says_so(figures: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    recovery.check_kills(figures)
    assert figures["kills_target_met"] is False
    err = capsys.readouterr().err
    assert "WARNING" in err and "fewer than the 10 required" in err
