"""Line splitting and batching of the runner's output tee."""

from __future__ import annotations

import io

from learner_image.log_tee import TRUNCATED_MARK, LineBatcher, decode_line, read_lines


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
