"""Tee the training command's output: live to Redis in small batches, durably to local files.

The reader (a runner thread) turns the pipe into lines with `read_lines` and hands each line,
and any metric parsed from it, to a `LogShipper`. The shipper appends them to the durable
log / metrics files at once and queues them for its thread, which sends them to a `Sink`
(Redis) in batches: a batch leaves as soon as no more lines are waiting, when it holds
`max_items`, or at the latest `max_delay` seconds after its first line, so a follower sees a
line within milliseconds while a chatty program still costs one round trip per few hundred
lines. When the sink fails, lines go to the durable files only for `SINK_RETRY_S` seconds
before the next try.
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


def dropped_marker(count: int) -> str:
    return (
        f"[dlaas] {count} lines were left out of the live log: the program wrote faster than "
        "they could be streamed. The stored log has every line (dlaas logs, once the job ends)."
    )


class LogShipper:
    """Durable files written by the caller's thread; the live stream fed by a background one.

    `line()` appends to the durable log (and metrics) file at once, so those files are
    complete whatever happens to the live stream, and queues the line for the sink. When more
    than `max_pending` items wait for the sink (a program writing faster than Redis takes
    lines), further lines skip the live stream until the backlog halves, and a marker line
    says how many were left out.
    """

    def __init__(
        self,
        sink: Sink,
        log_path: Path,
        metrics_path: Path,
        learner: int,
        max_items: int = 200,
        max_delay: float = 0.02,
        max_pending: int = 50_000,
    ) -> None:
        self.sink = sink
        self.learner = learner
        self.log_path = log_path
        self.metrics_path = metrics_path
        self.max_pending = max_pending
        self._log = log_path.open("a", encoding="utf-8")
        self._metrics = metrics_path.open("a", encoding="utf-8")
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._batcher: LineBatcher[Item] = LineBatcher(max_items, max_delay)
        self._file_lock = threading.Lock()
        self._line_lock = threading.Lock()
        self.dropped = 0
        self._dropping = 0
        self.sink_failures = 0
        self._sink_retry_at = 0.0
        self._thread = threading.Thread(target=self._run, name="dlaas-log-shipper", daemon=True)
        self._thread.start()

    def line(self, text: str, metric: MetricRecord | None = None) -> None:
        """Record one line of output (and the metric parsed from it); thread-safe."""
        now = time.time()
        timed = TimedMetric(metric, now) if metric is not None else None
        with self._file_lock:
            if self._log.closed:
                return
            self._log.write(text + "\n")
            if timed is not None:
                self._metrics.write(metric_json(self.learner, timed) + "\n")
        with self._line_lock:
            backlog = self._queue.qsize()
            if self._dropping:
                if backlog > self.max_pending // 2:
                    self._dropping += 1
                    self.dropped += 1
                    return
                self._queue.put(LogLine(dropped_marker(self._dropping), now))
                self._dropping = 0
            elif backlog >= self.max_pending:
                self._dropping = 1
                self.dropped += 1
                return
            self._queue.put(LogLine(text, now))
            if timed is not None:
                self._queue.put(timed)

    def close(self, timeout: float = 30.0) -> None:
        """Send what is pending, stop the thread and close the files (they stay readable)."""
        with self._line_lock:
            if self._dropping:
                self._queue.put(LogLine(dropped_marker(self._dropping), time.time()))
                self._dropping = 0
            self._queue.put(_STOP)
        self._thread.join(timeout)
        with self._file_lock:
            self._log.close()
            self._metrics.close()

    def flush_files(self) -> None:
        """Make everything recorded so far visible to a reader of the durable files."""
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
        self.flush_files()
        if not items:
            return
        now = time.monotonic()
        if now < self._sink_retry_at:
            return
        lines = [i for i in items if isinstance(i, LogLine)]
        metrics = [i for i in items if isinstance(i, TimedMetric)]
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
