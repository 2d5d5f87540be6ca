"""What a job's program wrote reaches the terminal with its control characters shown, not
obeyed: a log line that retitles the window (ESC ] 0 ; title BEL) or clears the screen
(ESC [ 2 J) is printed as `\\x1b]0;title\\x07`, by `dlaas logs` with and without --follow,
on a terminal or not, and in the reasons and metric names `dlaas list`, `show`, `wait` and
`metrics` print."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from cli.terminal_text import visible
from tests.unit.test_cli_stub_api import StubServer, invoke, make_job, running_stub

HOSTILE = "\x1b]0;pwned\x07\x1b[2Jstep 1\x1b[1;1H\x9b2J\x08done"
SHOWN = "\\x1b]0;pwned\\x07\\x1b[2Jstep 1\\x1b[1;1H\\x9b2J\\x08done"
JOB_ID = "training-hostile"


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLAAS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DLAAS_URL", raising=False)
    monkeypatch.delenv("DLAAS_TOKEN", raising=False)
    monkeypatch.setenv("COLUMNS", "400")


@pytest.fixture
def stub() -> Iterator[StubServer]:
    with running_stub() as server:
        server.stub.jobs[JOB_ID] = make_job(JOB_ID, "FAILED", reason=f"last line: {HOSTILE}")
        yield server


def _controls(text: str) -> set[str]:
    return {c for c in text if (ord(c) < 32 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F}


def test_visible_shows_every_control_but_newline_and_tab() -> None:
    assert visible(HOSTILE) == SHOWN
    assert visible("a\tb\nc é ✓") == "a\tb\nc é ✓"
    assert visible("50%\r100%\x00\x7f") == "50%\\x0d100%\\x00\\x7f"
    assert visible(visible(HOSTILE)) == SHOWN


@pytest.mark.parametrize("follow", [False, True])
def test_logs_print_a_programs_escape_sequences_visibly(stub: StubServer, follow: bool) -> None:
    stub.stub.sse_sessions[JOB_ID] = [
        ([("1-0", None, {"learner": 1, "line": HOSTILE, "time": 1.0}), (None, "end", {})], False)
    ]
    stub.stub.text_logs[JOB_ID] = {None: HOSTILE + "\n"}
    result = invoke(stub, "logs", JOB_ID, *(["--follow"] if follow else []))
    assert SHOWN in result.stdout and not _controls(result.stdout), repr(result.stdout)
    if follow:  # the outcome's reason, on stderr
        assert SHOWN in result.stderr and not _controls(result.stderr), repr(result.stderr)


def test_a_followed_log_on_a_terminal_shows_them_too(
    stub: StubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The live view with its status line is taken when stdout is a terminal.
    monkeypatch.setattr(
        "cli.logs.sys", SimpleNamespace(stdout=SimpleNamespace(isatty=lambda: True))
    )
    stub.stub.jobs[JOB_ID]["state"] = "RUNNING"
    stub.stub.sse_sessions[JOB_ID] = [
        (
            [
                ("1-0", None, {"learner": 1, "line": HOSTILE, "time": 1.0}),
                (None, "end", {"state": "COMPLETED"}),
            ],
            False,
        )
    ]
    result = invoke(stub, "logs", JOB_ID, "--follow")
    assert result.exit_code == 0, result.output
    assert SHOWN in result.stdout and not _controls(result.stdout), repr(result.stdout)


def test_reasons_and_metric_names_show_them_too(stub: StubServer) -> None:
    stub.stub.events[JOB_ID] = [
        {
            "time": "2026-01-02T03:04:05Z",
            "kind": "state",
            "from_state": "RUNNING",
            "to_state": "FAILED",
            "reason": HOSTILE,
            "detail": {},
        }
    ]
    stub.stub.metrics[JOB_ID] = [
        {"learner": 1, "step": 1, "time": 1.0, "values": {f"loss{HOSTILE}": f"[red]{HOSTILE}"}}
    ]
    for args in (("list",), ("show", JOB_ID), ("metrics", JOB_ID), ("wait", JOB_ID)):
        result = invoke(stub, *args)
        printed = result.stdout + result.stderr
        assert "\\x1b]0;pwned\\x07" in printed and not _controls(printed), (args, printed)
    assert "[red]" in invoke(stub, "metrics", JOB_ID).stdout
