"""Behind the durable log: the live stream, metric parsing and the metrics file.

Three threads follow what `learner_image.learner_log` writes, each at its own pace and at a
lower CPU priority than the program (which they must never slow down; on a busy core they
fall behind instead, and catch up when the program waits or ends):

- `LiveLogTail` sends the log's lines to the live stream in numbered batches. When it is
  more than `MAX_BEHIND_BYTES` behind (Redis slow or gone, a burst faster than it can send)
  it skips ahead to the last `KEEP_BYTES` of the file; readers see the gap in the line
  numbers and announce it with its exact size.
- `MetricsTail` parses every line (metric lines and the job's regexes), appends the points to
  the metrics file and sends them in numbered batches. It never skips: the metrics file is
  as complete as the log.
- `LiveSender` owns the Redis connection: it sends what the tails offer and never makes
  them wait longer than they ask to.

`LearnerOutput` puts them together for the runner. The log it follows is written in the same
process (`LearnerLog`) or, in a Kubernetes learner pod, by the program's container
(`learner_image.shared_log.SharedLog`).
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO, Protocol

from learner_image.learner_log import READ_BYTES, FollowedLog, LearnerLog, count_lines
from learner_image.metrics_parser import MetricRecord
from learner_image.sdk.thread_priority import lower_this_thread
from storage.streams import BATCH_BYTES, METRIC_BATCH_POINTS, LogBatch, MetricBatch, metric_line

MAX_BEHIND_BYTES = 4 << 20
KEEP_BYTES = 64 << 10
SINK_RETRY_S = 2.0
SEND_WAIT_S = 0.5
POLL_S = 0.5


class Sink(Protocol):
    def send(self, logs: Sequence[LogBatch], metrics: Sequence[MetricBatch]) -> None: ...


LiveItem = LogBatch | MetricBatch


class LiveSender:
    """Sends batches to the live stream from its own thread, several per round trip.

    `offer` waits at most `timeout` for room; while the sink is failing it refuses at once
    (for `SINK_RETRY_S` after each failure), so the tails skip instead of waiting on a dead
    connection."""

    def __init__(self, sink: Sink, capacity: int = 16) -> None:
        self.sink = sink
        self.failures = 0
        self._retry_at = 0.0
        self._queue: queue.Queue[LiveItem | None] = queue.Queue(capacity)
        self._thread = threading.Thread(target=self._run, name="dlaas-live-send", daemon=True)
        self._thread.start()

    def offer(self, item: LiveItem, timeout: float = SEND_WAIT_S) -> bool:
        if time.monotonic() < self._retry_at:
            return False
        try:
            self._queue.put(item, timeout=timeout)
        except queue.Full:
            return False
        return True

    def close(self, timeout: float = 30.0) -> None:
        """Send what is queued, then stop."""
        deadline = time.monotonic() + timeout
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(max(0.0, deadline - time.monotonic()))

    def _run(self) -> None:
        lower_this_thread()
        while True:
            items = [self._queue.get()]
            while len(items) < 64 and items[-1] is not None:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            self._send([i for i in items if i is not None])
            if items[-1] is None:
                return

    def _send(self, items: list[LiveItem]) -> None:
        if not items or time.monotonic() < self._retry_at:
            return
        logs = [i for i in items if isinstance(i, LogBatch)]
        metrics = [i for i in items if isinstance(i, MetricBatch)]
        try:
            self.sink.send(logs, metrics)
        except Exception as exc:
            self.failures += 1
            self._retry_at = time.monotonic() + SINK_RETRY_S
            if self.failures == 1 or self.failures % 100 == 0:
                print(
                    f"dlaas-learner: live log stream unavailable ({exc}); "
                    "lines are kept in the durable log",
                    file=sys.stderr,
                    flush=True,
                )


def _read(f: BinaryIO, offset: int, size: int) -> bytes:
    """Whole lines of the file from `offset`: about `READ_BYTES` of them, never past `size`
    (where a line ends)."""
    f.seek(offset)
    data = f.read(min(size - offset, READ_BYTES))
    if data and not data.endswith(b"\n"):
        data += f.readline()
    return data


def _lines(data: bytes) -> list[str]:
    lines = data.decode("utf-8", errors="replace").split("\n")
    lines.pop()  # after the last newline
    return lines


class _Follower:
    """A thread that follows a log from where this attempt's part of it starts, until it is
    closed and read to its end, and offers what it makes of it to a `LiveSender`."""

    def __init__(
        self, log: FollowedLog, name: str, sender: LiveSender, learner: int, attempt: int
    ) -> None:
        self.log = log
        self.sender = sender
        self.learner = learner
        self.attempt = attempt
        self.offset, self.line = log.origin
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def name(self) -> str:
        return self._thread.name

    def join(self, timeout: float) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _main(self) -> None:
        lower_this_thread()
        try:
            with self.log.open_reader() as f:
                while True:
                    size, closed = self.log.wait_beyond(self.offset, POLL_S)
                    if self.offset < size:
                        self.offset += self.follow(f, size, closed)
                    elif closed:
                        return
        except BaseException as exc:  # reported by the runner; the log itself is whole
            self.error = exc
            print(f"dlaas-learner: {self._thread.name} stopped: {exc!r}", file=sys.stderr)

    def follow(self, f: BinaryIO, size: int, closed: bool) -> int:
        """Handle what follows `self.offset`; returns how many bytes were consumed."""
        raise NotImplementedError


class LiveLogTail(_Follower):
    def __init__(
        self,
        log: FollowedLog,
        sender: LiveSender,
        learner: int,
        attempt: int,
        max_behind: int = MAX_BEHIND_BYTES,
        keep: int = KEEP_BYTES,
        send_wait: float = SEND_WAIT_S,
    ) -> None:
        super().__init__(log, "dlaas-live-log", sender, learner, attempt)
        self.send_wait = send_wait
        self.max_behind = max_behind
        self.keep = keep
        self.skipped = 0

    def follow(self, f: BinaryIO, size: int, closed: bool) -> int:
        consumed = 0
        if size - self.offset > self.max_behind:
            consumed = self._skip(f, size - self.keep)
        data = _read(f, self.offset + consumed, size)
        self._ship(data)
        return consumed + len(data)

    def _skip(self, f: BinaryIO, target: int) -> int:
        """Skip whole lines from `self.offset` to the first line end at or after `target`;
        the bytes skipped."""
        f.seek(self.offset)
        skipped = lines = 0
        last = b"\n"
        while self.offset + skipped < target:
            chunk = f.read(min(READ_BYTES, target - self.offset - skipped))
            if not chunk:
                break
            lines += chunk.count(b"\n")
            skipped += len(chunk)
            last = chunk[-1:]
        if last != b"\n":  # stopped inside a line: skip the rest of it too
            rest = f.readline()
            skipped += len(rest)
            lines += rest.count(b"\n")
        self.line += lines
        self.skipped += lines
        return skipped

    def _ship(self, data: bytes) -> None:
        """Send whole lines `data` in batches of at most `BATCH_BYTES` (or one longer line)."""
        start = 0
        while start < len(data):
            end = data.rfind(b"\n", start, start + BATCH_BYTES) + 1
            if end <= start:
                end = data.find(b"\n", start) + 1
            chunk = data[start:end]
            lines = tuple(chunk[:-1].decode("utf-8", errors="replace").split("\n"))
            batch = LogBatch(self.learner, self.attempt, self.line + 1, lines, time.time())
            if not self.sender.offer(batch, self.send_wait):
                self.skipped += len(lines)
            self.line += len(lines)
            start = end


MetricParse = Callable[[str], MetricRecord | None]


class MetricsTail(_Follower):
    def __init__(
        self,
        log: FollowedLog,
        metrics_path: Path,
        parse: MetricParse,
        sender: LiveSender,
        learner: int,
        attempt: int,
    ) -> None:
        super().__init__(log, "dlaas-metrics", sender, learner, attempt)
        self.parse = parse
        self.size, self.points = count_lines(metrics_path)
        self.dropped = 0
        self._file = open(metrics_path, "ab", buffering=0)  # noqa: SIM115 - closed at the end

    def follow(self, f: BinaryIO, size: int, closed: bool) -> int:
        data = _read(f, self.offset, size)
        parse = self.parse
        found = [record for line in _lines(data) if (record := parse(line)) is not None]
        if found:
            now = time.time()
            learner = self.learner
            points = [metric_line(learner, now, r.step, r.values) for r in found]
            text = ("\n".join(points) + "\n").encode()
            self._file.write(text)
            self.size += len(text)
            for start in range(0, len(points), METRIC_BATCH_POINTS):
                part = tuple(points[start : start + METRIC_BATCH_POINTS])
                batch = MetricBatch(learner, self.attempt, self.points + 1, part)
                if not self.sender.offer(batch):
                    self.dropped += len(part)
                self.points += len(part)
        return len(data)

    def close(self) -> None:
        self._file.close()


class LearnerOutput:
    """The runner's side of a learner's output: the durable log (a `LearnerLog` opened at
    `log`, when it is a path), and behind it the live stream and the metrics file."""

    def __init__(
        self,
        sink: Sink,
        log: FollowedLog | Path,
        metrics_path: Path,
        learner: int,
        attempt: int,
        parse: MetricParse,
    ) -> None:
        self.log: FollowedLog = LearnerLog(log) if isinstance(log, Path) else log
        self.sender = LiveSender(sink)
        self.live = LiveLogTail(self.log, self.sender, learner, attempt)
        self.metrics = MetricsTail(self.log, metrics_path, parse, self.sender, learner, attempt)
        self.live.start()
        self.metrics.start()

    def line(self, text: str) -> None:
        """A line of the runner's own, e.g. `[dlaas] ...`; thread-safe."""
        self.log.write_line(text)

    def stored_extent(self) -> tuple[int, int]:
        """Bytes of the log and of the metrics file that hold whole lines, for an upload."""
        return self.log.end(), self.metrics.size

    def close(self, stall_s: float = 30.0) -> None:
        """Let the live stream and the metrics catch up with the end of the log (the live
        stream skipping ahead if it is far behind, the metrics however long that takes while
        they make progress), send what is pending, stop. A follower that makes no progress
        for `stall_s` is left behind, and said so on stderr."""
        self.log.close()
        for follower in (self.live, self.metrics):
            if not _join_while_moving(follower, stall_s):
                print(
                    f"dlaas-learner: {follower.name} stuck at byte {follower.offset} of "
                    f"{self.log.end()}; left behind",
                    file=sys.stderr,
                    flush=True,
                )
        self.sender.close(stall_s)
        if not self.metrics.is_alive():
            self.metrics.close()


def _join_while_moving(follower: _Follower, stall_s: float) -> bool:
    """Wait for a follower to finish while it moves on; False if it stalls for `stall_s`."""
    last, still_since = follower.offset, time.monotonic()
    while not follower.join(min(1.0, stall_s)):
        if follower.offset != last:
            last, still_since = follower.offset, time.monotonic()
        elif time.monotonic() - still_since >= stall_s:
            return False
    return True
