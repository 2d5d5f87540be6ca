"""Line splitting, batching and shipping of the runner's output tee."""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from learner_image.log_tee import (
    TRUNCATED_MARK,
    LineBatcher,
    LogLine,
    LogShipper,
    TimedMetric,
    decode_line,
    dropped_marker,
    read_lines,
)
from learner_image.metrics_parser import MetricRecord


def test_decode_line_strips_newline_and_replaces_bad_utf8() -> None:
    assert decode_line(b"hello\n") == "hello"
    assert decode_line(b"crlf\r\n") == "crlf"
    assert decode_line(b"no newline") == "no newline"
    assert decode_line(b"bad \xff byte\n") == "bad \ufffd byte"
    assert decode_line("h\u00e9".encode() + b"\n") == "h\u00e9"


def test_decode_line_keeps_what_a_terminal_shows_after_carriage_returns() -> None:
    assert decode_line(b" 10%\r 50%\r100% done\n") == "100% done"


def test_read_lines_splits_and_keeps_empty_lines() -> None:
    stream = io.BytesIO(b"a\n\nb\nlast")
    assert list(read_lines(stream)) == ["a", "", "b", "last"]


def test_read_lines_caps_long_lines_and_skips_their_rest() -> None:
    stream = io.BytesIO(b"x" * 50 + b"\nshort\n" + b"y" * 10 + b"\n")
    assert list(read_lines(stream, max_bytes=8)) == [
        "x" * 8 + TRUNCATED_MARK,
        "short",
        "y" * 8 + TRUNCATED_MARK,
    ]


def test_read_lines_line_of_exactly_the_cap_is_not_truncated() -> None:
    assert list(read_lines(io.BytesIO(b"12345678\n"), max_bytes=8)) == ["12345678"]


def test_batcher_returns_a_full_batch_at_max_items() -> None:
    batcher: LineBatcher[int] = LineBatcher(max_items=3, max_delay=1.0)
    assert batcher.add(1, 0.0) is None
    assert batcher.add(2, 0.0) is None
    assert batcher.add(3, 0.0) == [1, 2, 3]
    assert len(batcher) == 0
    assert batcher.time_left(0.0) is None


def test_batcher_is_due_max_delay_after_its_first_item() -> None:
    batcher: LineBatcher[str] = LineBatcher(max_items=200, max_delay=0.25)
    assert not batcher.due(100.0)
    batcher.add("a", 100.0)
    batcher.add("b", 100.125)
    assert not batcher.due(100.1875)
    assert batcher.time_left(100.125) == 0.125
    assert batcher.due(100.25)
    assert batcher.time_left(100.5) == 0.0
    assert batcher.take() == ["a", "b"]
    assert not batcher.due(200.0)


def test_batcher_clock_restarts_with_each_batch() -> None:
    batcher: LineBatcher[str] = LineBatcher(max_items=2, max_delay=0.25)
    batcher.add("a", 0.0)
    assert batcher.add("b", 0.125) == ["a", "b"]
    batcher.add("c", 5.0)
    assert not batcher.due(5.125)
    assert batcher.due(5.25)


class FakeSink:
    def __init__(self, gate: threading.Event | None = None, fail: bool = False) -> None:
        self.lines: list[str] = []
        self.metrics: list[MetricRecord] = []
        self.batches = 0
        self.gate = gate
        self.fail = fail

    def send(self, lines: Sequence[LogLine], metrics: Sequence[TimedMetric]) -> None:
        if self.gate is not None:
            self.gate.wait(10)
        if self.fail:
            raise ConnectionError("redis is down")
        self.batches += 1
        self.lines.extend(line.text for line in lines)
        self.metrics.extend(m.record for m in metrics)


def shipper_for(tmp_path: Path, sink: FakeSink, **kwargs: int) -> LogShipper:
    return LogShipper(sink, tmp_path / "l.log", tmp_path / "l.metrics.jsonl", 1, **kwargs)


def test_shipper_sends_every_line_in_order_and_writes_the_files(tmp_path: Path) -> None:
    sink = FakeSink()
    shipper = shipper_for(tmp_path, sink)
    for i in range(1000):
        shipper.line(f"line {i}", MetricRecord(i, {"loss": 0.5}) if i % 100 == 0 else None)
    shipper.close()
    expected = [f"line {i}" for i in range(1000)]
    assert sink.lines == expected
    assert [m.step for m in sink.metrics] == list(range(0, 1000, 100))
    assert (tmp_path / "l.log").read_text().splitlines() == expected
    records = [json.loads(x) for x in (tmp_path / "l.metrics.jsonl").read_text().splitlines()]
    assert records[1]["learner"] == 1
    assert records[1]["step"] == 100
    assert records[1]["values"] == {"loss": 0.5}


def test_shipper_sends_a_lone_line_at_once(tmp_path: Path) -> None:
    sink = FakeSink()
    shipper = shipper_for(tmp_path, sink)
    shipper.line("hello")
    deadline = time.monotonic() + 2
    while not sink.lines and time.monotonic() < deadline:
        time.sleep(0.001)
    assert sink.lines == ["hello"]
    shipper.close()


def test_a_backlog_skips_the_live_stream_but_not_the_file(tmp_path: Path) -> None:
    gate = threading.Event()
    sink = FakeSink(gate)
    shipper = shipper_for(tmp_path, sink, max_pending=10)
    shipper.line("first")
    time.sleep(0.05)  # the shipper now waits on the gate with "first"
    for i in range(100):
        shipper.line(f"line {i}")
    gate.set()
    time.sleep(0.05)
    shipper.line("after")
    shipper.close()
    assert (tmp_path / "l.log").read_text().splitlines() == (
        ["first"] + [f"line {i}" for i in range(100)] + ["after"]
    )
    assert shipper.dropped == 90
    assert sink.lines[:11] == ["first"] + [f"line {i}" for i in range(10)]
    assert sink.lines[11] == dropped_marker(90)
    assert sink.lines[12:] == ["after"]


def test_a_failing_sink_leaves_the_durable_log_whole(tmp_path: Path) -> None:
    sink = FakeSink(fail=True)
    shipper = shipper_for(tmp_path, sink)
    for i in range(300):
        shipper.line(f"line {i}")
    shipper.close()
    assert shipper.sink_failures >= 1
    assert len((tmp_path / "l.log").read_text().splitlines()) == 300
