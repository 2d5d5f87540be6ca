"""The CLI's tables: piped, a row is one line that fits COLUMNS (else 80), its free text
cut with "…"; on a terminal free text wraps where it has room; ids and numbers are always
shown whole; `--wide` shows every cell whole."""

from __future__ import annotations

import io
import re

import pytest

from cli import output

JOB_ID = "training-4xx82yavr6"
REASON = "waiting behind job training-33z66tr5h9 (priority 0) which holds the reservation"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _table() -> None:
    output.print_table(
        ("JOB", "NAME", "WAITING FOR"), [(JOB_ID, "digits", REASON)], free=("WAITING FOR",)
    )


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _on_terminal(monkeypatch: pytest.MonkeyPatch, columns: int) -> _Terminal:
    terminal = _Terminal()
    monkeypatch.setattr("sys.stdout", terminal)
    monkeypatch.setenv("COLUMNS", str(columns))
    return terminal


def _lines(text: str) -> list[str]:
    return ANSI.sub("", text).splitlines()


def test_piped_a_row_is_one_line_cut_to_80_columns(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    _table()
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(len(line) <= 80 for line in lines), lines
    job, name, reason = lines[1].strip().split(maxsplit=2)
    assert (job, name) == (JOB_ID, "digits")
    assert reason.endswith("…") and REASON.startswith(reason[:-1]), reason


def test_piped_the_table_fits_columns_when_set(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    _table()
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].strip().split(maxsplit=2) == [JOB_ID, "digits", REASON]


def test_whole_cells_show_the_reason_whole_however_narrow(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    with output.whole_cells(True):
        _table()
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and "…" not in lines[1], lines
    assert lines[1].strip().split(maxsplit=2) == [JOB_ID, "digits", REASON]


def test_ids_and_numbers_stay_whole_when_they_alone_are_wider_than_the_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "30")
    output.print_table(("JOB", "SAMPLES/S", "NOTE"), [(JOB_ID, "123,456,789", "a remark")])
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == [JOB_ID, "123,456,789", "a", "remark"], lines


def test_on_a_narrow_terminal_the_reason_wraps_and_no_id_is_cut(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    terminal = _on_terminal(monkeypatch, 50)
    _table()
    lines = _lines(terminal.getvalue())
    assert len(lines) > 2 and all(len(line) <= 50 for line in lines), lines
    assert lines[1].split()[0] == JOB_ID and "…" not in "".join(lines)
    wrapped = " ".join(line[len(JOB_ID) + len("digits") + 4 :].strip() for line in lines[1:])
    assert wrapped == REASON, wrapped


def test_on_a_terminal_a_column_too_narrow_to_read_wrapped_is_cut(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    terminal = _on_terminal(monkeypatch, 44)
    _table()
    lines = _lines(terminal.getvalue())
    assert len(lines) == 2 and lines[1].rstrip().endswith("…"), lines
    assert len(lines[1]) <= 44


def test_a_cell_is_plain_text_not_markup(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    output.print_table(("NAME",), [("[wip] resnet [bold]x",)], free=("NAME",))
    assert "[wip] resnet [bold]x" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("natural", "room", "widths"),
    [
        ([5, 10], 30, {0: 5, 1: 10}),  # both fit: as they are
        ([5, 40], 30, {0: 5, 1: 25}),  # the short one keeps its width, the long one the rest
        ([40, 40], 30, {0: 15, 1: 15}),  # an even share each
        ([40, 40], 31, {0: 16, 1: 15}),
        ([40, 40], 4, {0: 6, 1: 6}),  # never under the minimum
    ],
)
def test_free_columns_share_the_room(natural: list[int], room: int, widths: dict) -> None:
    assert output.fit_free_columns(natural, [0, 1], room, [6, 6]) == widths
