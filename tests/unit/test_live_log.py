"""Behind the durable log: numbered live batches, skip-ahead, complete metrics."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path

from learner_image.learner_log import LearnerLog
from learner_image.live_log import LearnerOutput, LiveLogTail, LiveSender
from learner_image.metrics_parser import MetricRecord
from storage.streams import LogBatch, MetricBatch


class FakeSink:
    def __init__(self, gate: threading.Event | None = None, fail: bool = False) -> None:
        self.logs: list[LogBatch] = []
        self.metrics: list[MetricBatch] = []
        self.gate = gate
        self.fail = fail
        self.waiting = threading.Event()

    def send(self, logs: Sequence[LogBatch], metrics: Sequence[MetricBatch]) -> None:
        if self.gate is not None:
            self.waiting.set()
            self.gate.wait(30)
        if self.fail:
            raise ConnectionError("redis is down")
        self.logs.extend(logs)
        self.metrics.extend(metrics)


def parse_loss(line: str) -> MetricRecord | None:
    if not line.startswith("step "):
        return None
    step = int(line.split()[1])
    return MetricRecord(step, {"loss": 1.0 / (step + 1)})


def lines_by_number(batches: Sequence[LogBatch]) -> dict[int, str]:
    numbered: dict[int, str] = {}
    for batch in batches:
        for offset, line in enumerate(batch.lines):
            assert batch.first + offset not in numbered, "a line sent twice"
            numbered[batch.first + offset] = line
    return numbered


def test_every_line_and_point_goes_live_numbered_and_to_the_files(tmp_path: Path) -> None:
    (tmp_path / "learner-1.log").write_text("earlier attempt\n")
    sink = FakeSink()
    out = LearnerOutput(sink, tmp_path / "learner-1.log", tmp_path / "m.jsonl", 1, 2, parse_loss)
    for i in range(5000):
        out.log.append(f"step {i} loss\n".encode())
    out.line("[dlaas] the end")
    out.close()
    assert lines_by_number(sink.logs) == {n + 2: f"step {n} loss" for n in range(5000)} | {
        5002: "[dlaas] the end"
    }
    assert {b.attempt for b in sink.logs} == {2}
    points = [(b.first + i, p) for b in sink.metrics for i, p in enumerate(b.points)]
    assert [n for n, _ in points] == list(range(1, 5001))
    stored = (tmp_path / "m.jsonl").read_text().splitlines()
    assert stored == [p for _, p in points]
    assert json.loads(stored[7]) | {"time": 0} == {
        "learner": 1,
        "time": 0,
        "step": 7,
        "values": {"loss": 0.125},
    }
    assert out.stored_extent() == (
        (tmp_path / "learner-1.log").stat().st_size,
        len((tmp_path / "m.jsonl").read_bytes()),
    )


def test_a_live_stream_that_falls_behind_skips_ahead_and_its_numbers_show_the_gap(
    tmp_path: Path,
) -> None:
    gate = threading.Event()
    sink = FakeSink(gate)
    log = LearnerLog(tmp_path / "learner-1.log")
    sender = LiveSender(sink, capacity=2)
    tail = LiveLogTail(log, sender, 1, 0, max_behind=4096, keep=512, send_wait=0.01)
    tail.start()
    log.append(b"first\n")
    assert sink.waiting.wait(10)  # the sender is stuck sending "first"
    written = [f"line {i:05d}" for i in range(20_000)]
    for start in range(0, len(written), 100):
        log.append("".join(x + "\n" for x in written[start : start + 100]).encode())
    gate.set()
    log.close()
    assert tail.join(30)
    sender.close()
    live = lines_by_number(sink.logs)
    everything = ["first", *written]
    assert all(everything[n - 1] == line for n, line in live.items())
    assert tail.skipped > 0
    assert len(live) + tail.skipped == len(everything)
    assert max(live) == len(everything), "the last line always goes live"
    assert log.path.read_text().splitlines() == everything


def test_a_failing_stream_leaves_the_files_whole(tmp_path: Path) -> None:
    sink = FakeSink(fail=True)
    out = LearnerOutput(sink, tmp_path / "l.log", tmp_path / "m.jsonl", 1, 0, parse_loss)
    for i in range(3000):
        out.log.append(f"step {i}\n".encode())
    out.close()
    assert out.sender.failures >= 1
    assert len((tmp_path / "l.log").read_text().splitlines()) == 3000
    assert len((tmp_path / "m.jsonl").read_text().splitlines()) == 3000
