"""The CLI's tables: piped, a line is never cut; in a narrow terminal only free text wraps,
and ids are shown whole."""

from __future__ import annotations

import pytest

from cli import output

JOB_ID = "training-4xx82yavr6"
REASON = "waiting behind job training-33z66tr5h9 (priority 0) which holds the reservation"


def _table() -> None:
    output.print_table(
        ("JOB", "NAME", "WAITING FOR"), [(JOB_ID, "digits", REASON)], wrap=("WAITING FOR",)
    )


def test_a_piped_table_keeps_each_row_on_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    _table()
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2, lines
    assert lines[1].strip().split(maxsplit=2) == [JOB_ID, "digits", REASON]


def test_a_narrow_terminal_wraps_the_reason_and_never_cuts_an_id(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(output, "_UNCUT_WIDTH", 50)
    _table()
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) > 2 and all(len(line) <= 50 for line in lines), lines
    assert lines[1].split()[0] == JOB_ID and "…" not in "".join(lines)
    wrapped = " ".join(line[len(JOB_ID) + len("digits") + 4 :].strip() for line in lines[1:])
    assert wrapped == REASON, wrapped
