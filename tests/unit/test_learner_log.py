"""The runner's durable log: lines as stored, captured from a real pipe, numbered."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from learner_image.learner_log import (
    TRUNCATED_MARK,
    LearnerLog,
    capture_output,
    decode_line,
    normalize_output,
)


def test_decode_line_strips_newline_and_replaces_bad_utf8() -> None:
    assert decode_line(b"hello\n") == "hello"
    assert decode_line(b"crlf\r\n") == "crlf"
    assert decode_line(b"no newline") == "no newline"
    assert decode_line(b"bad \xff byte\n") == "bad \ufffd byte"
    assert decode_line("h\u00e9".encode() + b"\n") == "h\u00e9"


def test_decode_line_keeps_what_a_terminal_shows_after_carriage_returns() -> None:
    assert decode_line(b" 10%\r 50%\r100% done\n") == "100% done"


def test_plain_output_is_stored_as_it_is() -> None:
    data = "a\n\nb \u00e9\n".encode()
    assert normalize_output(data) is data


def test_output_that_needs_it_is_fixed_line_by_line() -> None:
    assert normalize_output(b"ok\n 10%\r100%\nbad \xff\n") == "ok\n100%\nbad \ufffd\n".encode()
    assert normalize_output(b"x" * 20 + b"\nshort\n", max_bytes=8) == (
        ("x" * 8 + TRUNCATED_MARK + "\nshort\n").encode()
    )
    assert normalize_output(b"12345678\n", max_bytes=8) == b"12345678\n"


def capture(tmp_path: Path, pieces: list[bytes], max_bytes: int = 16) -> tuple[str, LearnerLog]:
    """Write `pieces` into a real pipe one by one and capture it."""
    log = LearnerLog(tmp_path / "learner-1.log")
    read_end, write_end = os.pipe()

    def write() -> None:
        with os.fdopen(write_end, "wb", buffering=0) as out:
            for piece in pieces:
                out.write(piece)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        last = capture_output(read_end, log, max_bytes=max_bytes)
    finally:
        os.close(read_end)
        writer.join()
    return last, log


def test_capture_keeps_every_line_across_reads(tmp_path: Path) -> None:
    pieces = [b"one\ntw", b"o\n", b"\n", b"three\n", b"  \n"]
    last, log = capture(tmp_path, pieces)
    assert log.path.read_text().splitlines() == ["one", "two", "", "three", "  "]
    assert last == "three"
    assert log.extent() == (log.path.stat().st_size, 5)


def test_capture_cuts_a_long_line_and_skips_its_rest_over_several_reads(tmp_path: Path) -> None:
    pieces = [b"start\n", b"y" * 10, b"y" * 10, b"y" * 10, b"yy\nafter\nno newline"]
    last, log = capture(tmp_path, pieces, max_bytes=16)
    assert log.path.read_text().splitlines() == [
        "start",
        "y" * 16 + TRUNCATED_MARK,
        "after",
        "no newline",
    ]
    assert last == "no newline"


def test_a_log_continues_an_earlier_attempts_file(tmp_path: Path) -> None:
    path = tmp_path / "learner-1.log"
    path.write_bytes(b"old 1\nold 2\ncut off mid-li")
    log = LearnerLog(path)
    assert log.lines == 3  # the cut-off line is completed and counted
    log.write_line("[dlaas] first\nsecond")
    log.close()
    assert path.read_text().splitlines() == [
        "old 1",
        "old 2",
        "cut off mid-li",
        "[dlaas] first",
        "second",
    ]
    assert log.lines == 5


class ScriptedPipe:
    """Stands in for `os` and `time` in `learner_image.learner_log`: `read` hands out the
    script's chunks (b"" is the end), each taking `read_s` on the fake clock; `sleep` only
    records the naps."""

    def __init__(self, chunks: list[bytes], read_s: float) -> None:
        self.chunks = list(chunks)
        self.read_s = read_s
        self.now = 0.0
        self.naps: list[tuple[int, float]] = []  # (chunks read so far, seconds)
        self.reads = 0

    def read(self, fd: int, size: int) -> bytes:
        self.now += self.read_s
        self.reads += 1
        return self.chunks.pop(0)

    def sleep(self, seconds: float) -> None:
        self.naps.append((self.reads, seconds))

    def monotonic(self) -> float:
        return self.now


def capture_scripted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunks: list[bytes], read_s: float
) -> tuple[ScriptedPipe, list[bytes]]:
    from learner_image import learner_log

    pipe = ScriptedPipe([*chunks, b""], read_s)
    log = LearnerLog(tmp_path / "learner-1.log")
    read_end, write_end = os.pipe()  # only widened: the reads are the script's
    monkeypatch.setattr(learner_log, "os", pipe)
    monkeypatch.setattr(learner_log, "time", pipe)
    try:
        capture_output(read_end, log, gather_s=0.002, clock=pipe.monotonic)
    finally:
        monkeypatch.undo()
        os.close(read_end)
        os.close(write_end)
    log.close()
    return pipe, log.path.read_bytes().splitlines()


def test_a_flood_is_read_in_gathered_chunks_not_line_by_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = [b"step %d\n" % i for i in range(3)]
    pipe, stored = capture_scripted(tmp_path, monkeypatch, lines, read_s=0.0001)
    assert stored == [b"step 0", b"step 1", b"step 2"]
    assert pipe.naps == [(1, 0.002), (2, 0.002), (3, 0.002)]


def test_a_line_after_a_quiet_spell_and_the_rest_of_a_line_begun_are_read_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    quiet, stored = capture_scripted(tmp_path, monkeypatch, [b"a\n", b"b\n"], read_s=1.0)
    assert quiet.naps == []
    assert stored == [b"a", b"b"]
    # print("tick", 7) writes "tick", " ", "7", "\n": no nap until the line is whole.
    pieces = [b"tick", b" ", b"7", b"\n"]
    begun, stored = capture_scripted(tmp_path / "begun", monkeypatch, pieces, read_s=0.0001)
    assert begun.naps == [(4, 0.002)]
    assert stored == [b"tick 7"]
