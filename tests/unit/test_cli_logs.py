"""Logs: SSE parsing, reconnecting with Last-Event-ID, and `dlaas logs` output."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.client import DlaasClient, DlaasConnectionError
from cli.sse import SseEvent, parse_sse
from tests.unit.test_cli_stub_api import (
    TOKEN,
    SseSession,
    StubServer,
    invoke,
    make_job,
    running_stub,
)


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLAAS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DLAAS_URL", raising=False)
    monkeypatch.delenv("DLAAS_TOKEN", raising=False)


@pytest.fixture
def stub() -> Iterator[StubServer]:
    with running_stub() as server:
        yield server


def line(n: int, learner: int, text: str) -> tuple[str, None, dict]:
    return (f"{n}-0", None, {"learner": learner, "line": text, "time": 1.0 + n})


def end(state: str) -> tuple[None, str, dict]:
    return (None, "end", {"state": state})


def test_parse_sse_fields_comments_and_multiline_data() -> None:
    raw = [
        ": comment",
        "id: 1-0",
        'data: {"a": 1}',
        "",
        "event: end",
        "data: first",
        "data:second",
        "retry: 300",
        "",
        "data: unterminated",
    ]
    assert list(parse_sse(raw)) == [
        SseEvent("message", '{"a": 1}', "1-0"),
        SseEvent("end", "first\nsecond", "1-0", 300),
    ]


def test_parse_sse_ignores_blocks_without_data() -> None:
    assert list(parse_sse(["id: 5", "", "event: ping", "", "data: x", ""])) == [
        SseEvent("message", "x", "5")
    ]


def test_reconnects_after_a_dropped_stream_with_last_event_id(stub: StubServer) -> None:
    job_id = "training-abc"
    stub.stub.jobs[job_id] = make_job(job_id, "RUNNING")
    stub.stub.sse_sessions[job_id] = [
        ([line(1, 1, "one"), line(2, 1, "two")], True),
        ([line(3, 1, "three"), end("COMPLETED")], False),
    ]
    delays: list[float] = []
    with DlaasClient(stub.url, TOKEN, sleep=delays.append) as client:
        events = list(client.iter_log_events(job_id, follow=True))
    assert [e.get("line") for e in events] == ["one", "two", "three", None]
    assert events[-1] == {"event": "end", "state": "COMPLETED"}
    calls = stub.stub.requests("GET", f"/v2/jobs/{job_id}/logs")
    assert len(calls) == 2
    assert "Last-Event-ID" not in calls[0].headers
    assert calls[1].headers["Last-Event-ID"] == "2-0"
    assert calls[1].query["follow"] == ["true"]
    assert len(delays) == 1


def test_a_cleanly_closed_follow_stream_without_end_is_reopened(stub: StubServer) -> None:
    job_id = "training-abc"
    stub.stub.jobs[job_id] = make_job(job_id, "RUNNING")
    stub.stub.sse_sessions[job_id] = [
        ([line(7, 1, "seven")], False),
        ([], False),
        ([end("FAILED")], False),
    ]
    with DlaasClient(stub.url, TOKEN, sleep=lambda _: None) as client:
        events = list(client.iter_log_events(job_id, follow=True))
    assert [e["event"] for e in events] == ["line", "end"]
    calls = stub.stub.requests("GET", f"/v2/jobs/{job_id}/logs")
    assert [c.headers.get("Last-Event-ID") for c in calls] == [None, "7-0", "7-0"]


def test_gives_up_once_the_stream_was_lost_for_retry_for_seconds(stub: StubServer) -> None:
    job_id = "training-abc"
    stub.stub.jobs[job_id] = make_job(job_id, "RUNNING")
    stub.stub.sse_sessions[job_id] = [([], True)] * 10
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    client = DlaasClient(stub.url, TOKEN, sleep=sleep, clock=lambda: now[0], retry_for=3.0)
    with client, pytest.raises(DlaasConnectionError, match="lost for 3 s, 4 tries"):
        list(client.iter_log_events(job_id, follow=True))
    # Reconnects after 0.5, 1 and 2 s; the fourth loss comes 3.5 s after the first.
    assert len(stub.stub.requests("GET", f"/v2/jobs/{job_id}/logs")) == 4
    assert now[0] == 3.5


def test_logs_follow_prefixes_learners_and_exits_with_the_outcome(stub: StubServer) -> None:
    job_id = "training-two"
    stub.stub.jobs[job_id] = make_job(job_id, "RUNNING", learners=2)
    stub.stub.sse_sessions[job_id] = [
        ([line(1, 1, "epoch 1"), line(2, 2, "epoch 1 [rank 1]"), end("COMPLETED")], False)
    ]
    result = invoke(stub, "logs", job_id, "--follow")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["[1] epoch 1", "[2] epoch 1 [rank 1]"]

    stub.stub.sse_sessions[job_id] = [([line(3, 1, "boom"), end("FAILED")], False)]
    stub.stub.jobs[job_id]["reason"] = "learner 1 exited with code 3"
    result = invoke(stub, "logs", job_id, "-f")
    assert result.exit_code == 1
    assert result.stdout == "[1] boom\n"
    assert "FAILED" in result.stderr and "learner 1 exited with code 3" in result.stderr


def test_logs_single_learner_lines_are_not_prefixed(stub: StubServer) -> None:
    job_id = "training-one"
    stub.stub.jobs[job_id] = make_job(job_id, "RUNNING")
    stub.stub.sse_sessions[job_id] = [([line(1, 1, "[not markup] 50%"), end("COMPLETED")], False)]
    result = invoke(stub, "logs", job_id, "--follow")
    assert result.exit_code == 0, result.output
    assert result.stdout == "[not markup] 50%\n"


def test_logs_without_follow_asks_once_for_the_learner_named(stub: StubServer) -> None:
    """The order of several learners' lines is the server's (tests/integration/
    test_cli_logs_order.py); a plain-text answer is printed as it comes."""
    job_id = "training-two"
    stub.stub.jobs[job_id] = make_job(job_id, "COMPLETED", learners=2)
    stub.stub.text_logs[job_id] = {1: "a\nb\n", 2: "c\n", None: "a\nc\nb\n"}
    result = invoke(stub, "logs", job_id)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["a", "c", "b"]
    calls = stub.stub.requests("GET", f"/v2/jobs/{job_id}/logs")
    assert calls[-1].query == {"follow": ["false"]}

    result = invoke(stub, "logs", job_id, "--learner", "2")
    assert result.stdout == "c\n"
    calls = stub.stub.requests("GET", f"/v2/jobs/{job_id}/logs")
    assert calls[-1].query == {"follow": ["false"], "learner": ["2"]}


def test_logs_learner_out_of_range_is_refused(stub: StubServer) -> None:
    stub.stub.jobs["training-one"] = make_job("training-one")
    result = invoke(stub, "logs", "training-one", "--learner", "3")
    assert result.exit_code == 1
    assert "--learner 3" in result.stderr
    assert not stub.stub.requests("GET", "/v2/jobs/training-one/logs")


def test_logs_json_is_one_object_per_line(stub: StubServer) -> None:
    job_id = "training-one"
    stub.stub.jobs[job_id] = make_job(job_id, "RUNNING")
    stub.stub.sse_sessions[job_id] = [([line(1, 1, "hello"), end("COMPLETED")], False)]
    result = invoke(stub, "--output", "json", "logs", job_id, "--follow")
    assert result.exit_code == 0, result.output
    rows = [json.loads(text) for text in result.stdout.splitlines()]
    assert rows == [
        {"event": "line", "learner": 1, "line": "hello", "time": 2.0},
        {"event": "end", "state": "COMPLETED"},
    ]


def test_logs_follow_says_when_it_reconnects(stub: StubServer) -> None:
    job_id = "training-one"
    stub.stub.jobs[job_id] = make_job(job_id, "RUNNING")
    stub.stub.sse_sessions[job_id] = [
        ([line(1, 1, "before")], True),
        ([line(2, 1, "after"), end("COMPLETED")], False),
    ]
    result = invoke(stub, "logs", job_id, "--follow")
    assert result.exit_code == 0, result.output
    assert result.stdout == "before\nafter\n"
    assert "log stream interrupted" in result.stderr and "reconnecting" in result.stderr


def test_a_follow_ends_saying_the_job_was_halted_or_deleted(stub: StubServer) -> None:
    job_id = "training-gone"
    stub.stub.jobs[job_id] = make_job(job_id, "RUNNING")
    stub.stub.sse_sessions[job_id] = [([line(1, 1, "step 1"), end("DELETED")], False)]
    result = invoke(stub, "logs", job_id, "--follow")
    assert result.exit_code == 1
    assert result.stdout == "step 1\n"
    assert f"job {job_id} was deleted" in result.stderr

    stub.stub.sse_sessions[job_id] = [([line(2, 1, "step 2"), end("HALTED")], False)]
    result = invoke(stub, "logs", job_id, "--follow")
    assert result.exit_code == 1
    assert f"job {job_id} HALTED" in result.stderr
    assert f"`dlaas resume {job_id}`" in result.stderr


# -- the SDK's metric lines --------------------------------------------------------------------

METRIC = '{"dlaas_metric": true, "step": 3, "loss": 0.5}'


@pytest.mark.parametrize("follow", [False, True])
def test_logs_leave_out_the_sdks_metric_lines_unless_raw(stub: StubServer, follow: bool) -> None:
    job_id = "training-one"
    stub.stub.jobs[job_id] = make_job(job_id, "COMPLETED")
    shown = ["epoch 1", METRIC, "epoch 2", f"  {METRIC}", "done"]
    stub.stub.text_logs[job_id] = {None: "".join(f"{text}\n" for text in shown)}
    session: SseSession = (
        [*(line(n, 1, text) for n, text in enumerate(shown)), end("COMPLETED")],
        False,
    )
    flags = ["--follow"] if follow else []

    stub.stub.sse_sessions[job_id] = [session]
    result = invoke(stub, "logs", job_id, *flags)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["epoch 1", "epoch 2", "done"]
    assert "2 metric line(s) left out" in result.stderr and "--raw" in result.stderr

    stub.stub.sse_sessions[job_id] = [session]
    result = invoke(stub, "logs", job_id, *flags, "--raw")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == shown
    assert "left out" not in result.stderr


def test_logs_as_json_keep_every_line(stub: StubServer) -> None:
    job_id = "training-one"
    stub.stub.jobs[job_id] = make_job(job_id, "RUNNING")
    stub.stub.sse_sessions[job_id] = [([line(1, 1, METRIC), end("COMPLETED")], False)]
    result = invoke(stub, "--output", "json", "logs", job_id, "--follow")
    assert result.exit_code == 0, result.output
    assert [json.loads(text)["line"] for text in result.stdout.splitlines()[:1]] == [METRIC]


@pytest.mark.parametrize(
    "text",
    [
        METRIC,
        '  {"dlaas_metric": true, "loss": 2}\r\n',
        '{"dlaas_metric": true, "step": null, "acc": 1e-3}',
        '{"dlaas_metric": true, "step": 1, "loss": 0.5, "tag": "x", "ok": true}',
        '{"dlaas_metric": true, "step": 1, "loss": NaN, "acc": 0.5}',
        '{"dlaas_metric": true, "step": 1, "loss": NaN}',
        '{"dlaas_metric": true, "step": 1, "nested": {"a": 1}}',
        '{"dlaas_metric": true, "step": 4}',
        '{"dlaas_metric": false, "step": 1, "loss": 0.5}',
        '{"dlaas_metric": 1, "step": 1, "loss": 0.5}',
        '{"dlaas_metric": true, "step": -1, "loss": 0.5}',
        '{"dlaas_metric": true, "step": 1.0, "loss": 0.5}',
        '{"dlaas_metric": true, "step": true, "loss": 0.5}',
        '{"dlaas_metric": true, "loss": true}',
        '{"dlaas_metric": true, "loss": 0.5',
        '["dlaas_metric", true]',
        'step 3: {"dlaas_metric": true, "loss": 0.5}',
        '{"loss": 0.5}',
        "epoch 1 loss 0.5",
        "",
        '{"dlaas_metric": true, "loss": 0.5, "pad": "' + "x" * 65536 + '"}',
    ],
)
def test_the_cli_takes_as_metric_lines_what_the_runner_does(text: str) -> None:
    from cli.metric_lines import is_metric_line
    from learner_image.metric_lines import parse_metric_line

    assert is_metric_line(text) == (parse_metric_line(text) is not None)


def test_what_the_sdk_writes_is_a_metric_line() -> None:
    from cli.metric_lines import is_metric_line
    from learner_image.metric_lines import format_metric_line

    assert is_metric_line(format_metric_line(7, {"loss": 0.25, "accuracy": 0.9}))
    assert is_metric_line(format_metric_line(None, {"loss": 1}))
