"""The exit report a runner leaves with its learner: written, read back, and kept small."""

from __future__ import annotations

from pathlib import Path

from storage import exit_reports
from storage.exit_reports import MAX_BYTES, ExitReport


def test_a_report_left_where_the_backend_asked_reads_back_the_same(tmp_path: Path) -> None:
    report = ExitReport(1, None, "the command exited with code 1", stopped=False, last_line="x")
    path = tmp_path / "exit-report.json"
    exit_reports.leave(report, {exit_reports.EXIT_REPORT_ENV: str(path)})
    assert exit_reports.read(path) == report
    exit_reports.leave(report, {})  # not asked: nothing is written, nothing fails
    assert exit_reports.read(tmp_path / "missing.json") is None


def test_a_report_fits_a_kubernetes_termination_message_whatever_it_holds() -> None:
    huge = ExitReport(3, None, "r" * 20_000, stopped=False, last_line="é" * 5_000)
    text = huge.to_json()
    assert len(text.encode()) <= MAX_BYTES
    back = ExitReport.from_json(text)
    assert back is not None
    assert (back.exit_code, back.last_line) == (3, "é" * 500)
    assert back.reason and huge.reason.startswith(back.reason)
    wide = ExitReport(3, None, "why", stopped=False, last_line="\U0001f600" * 500)
    assert len(wide.to_json().encode()) <= MAX_BYTES


def test_any_other_text_is_no_report() -> None:
    for text in ("", "OOMKilled", "[1, 2]", '{"dlaas_exit": {"exit_code": "x"}}', "{}"):
        assert ExitReport.from_json(text) is None
