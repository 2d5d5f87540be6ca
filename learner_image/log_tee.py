"""Tee the training command's output: live to Redis in small batches, durably to local files.

The reader (the runner's main loop) turns the pipe into lines with `read_lines` and hands
each line, and any metric parsed from it, to a `LogShipper`. The shipper's thread writes them
to the durable log / metrics files and sends them to a `Sink` (Redis) in batches: a batch
leaves as soon as no more lines are waiting, when it holds `max_items`, or at the latest
`max_delay` seconds after its first line, so a follower sees a line within milliseconds
while a chatty program still costs one round trip per few hundred lines. When the sink
fails, lines go to the durable files only for `SINK_RETRY_S` seconds before the next try.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Generic, Protocol, TypeVar

from learner_image.metrics_parser import MetricRecord

MAX_LINE_BYTES = 16 * 1024
TRUNCATED_MARK = " [line truncated by dlaas]"
SINK_RETRY_S = 2.0


def decode_line(raw: bytes) -> str:
    """Text of one raw line: trailing newline dropped, invalid UTF-8 replaced, and of a
    carriage-return-overwritten line (progress bars) only what a terminal would show last."""
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    text = raw.decode("utf-8", errors="replace").rstrip("\r")
    if "\r" in text:
        text = text.rsplit("\r", 1)[1]
    return text


def read_lines(stream: IO[bytes], max_bytes: int = MAX_LINE_BYTES) -> Iterator[str]:
    """Lines of `stream` until EOF; a line longer than `max_bytes` is cut and marked."""
    while True:
        raw = stream.readline(max_bytes + 1)
        if not raw:
            return
        if len(raw) > max_bytes and not raw.endswith(b"\n"):
            # Skip the rest of the over-long line.
            while True:
                rest = stream.readline(max_bytes)
                if not rest or rest.endswith(b"\n"):
                    break
            yield decode_line(raw[:max_bytes]) + TRUNCATED_MARK
            continue
        yield decode_line(raw)


T = TypeVar("T")


class LineBatcher(Generic[T]):
    """Collect items into batches of at most `max_items`, none older than `max_delay` s."""

    def __init__(self, max_items: int = 200, max_delay: float = 0.02) -> None:
        self.max_items = max_items
        self.max_delay = max_delay
        self._items: list[T] = []
        self._first_at = 0.0

    def __len__(self) -> int:
        return len(self._items)

    def add(self, item: T, now: float) -> list[T] | None:
        """Add an item; returns the batch if it is now full."""
        if not self._items:
            self._first_at = now
        self._items.append(item)
        if len(self._items) >= self.max_items:
            return self.take()
        return None

    def due(self, now: float) -> bool:
        return bool(self._items) and now - self._first_at >= self.max_delay

    def time_left(self, now: float) -> float | None:
        """Seconds until the pending batch is due; None when nothing is pending."""
        if not self._items:
            return None
        return max(0.0, self.max_delay - (now - self._first_at))

    def take(self) -> list[T]:
        items, self._items = self._items, []
        return items


@dataclass(frozen=True)
class LogLine:
    text: str
    time: float


@dataclass(frozen=True)
class TimedMetric:
    record: MetricRecord
    time: float


Item = LogLine | TimedMetric


class Sink(Protocol):
    def send(self, lines: Sequence[LogLine], metrics: Sequence[TimedMetric]) -> None: ...


def metric_json(learner: int, metric: TimedMetric) -> str:
    """One line of the durable metrics file (the shape `GET /v2/jobs/{id}/metrics` returns)."""
    return json.dumps(
        {
            "learner": learner,
            "time": metric.time,
            "step": metric.record.step,
            "values": metric.record.values,
        },
        separators=(",", ":"),
    )


_STOP = object()


class LogShipper:
    """Background thread: durable files first, then the sink, batch by batch."""

    def __init__(
        self,
        sink: Sink,
        log_path: Path,
        metrics_path: Path,
        learner: int,
        max_items: int = 200,
        max_delay: float = 0.02,
    ) -> None:
        self.sink = sink
        self.learner = learner
        self.log_path = log_path
        self.metrics_path = metrics_path
        self._log = log_path.open("a", encoding="utf-8")
        self._metrics = metrics_path.open("a", encoding="utf-8")
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._batcher: LineBatcher[Item] = LineBatcher(max_items, max_delay)
        self._file_lock = threading.Lock()
        self.sink_failures = 0
        self._sink_retry_at = 0.0
        self._thread = threading.Thread(target=self._run, name="dlaas-log-shipper", daemon=True)
        self._thread.start()

    def line(self, text: str, metric: MetricRecord | None = None) -> None:
        now = time.time()
        self._queue.put(LogLine(text, now))
        if metric is not None:
            self._queue.put(TimedMetric(metric, now))

    def close(self, timeout: float = 10.0) -> None:
        """Send what is pending and stop the thread; files stay readable."""
        self._queue.put(_STOP)
        self._thread.join(timeout)
        with self._file_lock:
            self._log.close()
            self._metrics.close()

    def flush_files(self) -> None:
        """Make everything written so far visible to a reader of the durable files."""
        with self._file_lock:
            if not self._log.closed:
                self._log.flush()
                self._metrics.flush()

    def _run(self) -> None:
        batcher = self._batcher
        while True:
            try:
                item = self._queue.get(timeout=batcher.time_left(time.monotonic()))
            except queue.Empty:
                self._send(batcher.take())
                continue
            if item is _STOP:
                self._send(batcher.take())
                return
            assert isinstance(item, LogLine | TimedMetric)
            full = batcher.add(item, time.monotonic())
            if full is not None:
                self._send(full)
            elif self._queue.empty() or batcher.due(time.monotonic()):
                self._send(batcher.take())

    def _send(self, items: list[Item]) -> None:
        if not items:
            return
        lines = [i for i in items if isinstance(i, LogLine)]
        metrics = [i for i in items if isinstance(i, TimedMetric)]
        with self._file_lock:
            if self._log.closed:
                return
            self._log.writelines(line.text + "\n" for line in lines)
            self._log.flush()
            if metrics:
                self._metrics.writelines(metric_json(self.learner, m) + "\n" for m in metrics)
                self._metrics.flush()
        now = time.monotonic()
        if now < self._sink_retry_at:
            return
        try:
            self.sink.send(lines, metrics)
        except Exception as exc:
            self.sink_failures += 1
            self._sink_retry_at = now + SINK_RETRY_S
            if self.sink_failures == 1 or self.sink_failures % 100 == 0:
                print(
                    f"dlaas-learner: live log stream unavailable ({exc}); "
                    "lines are kept in the durable log",
                    file=sys.stderr,
                    flush=True,
                )
