"""SIGTERM and SIGHUP unwind the process as Ctrl-C does, so that what started a platform
stops it on the way out (`finally`, a fixture's teardown) instead of leaving its services
and learners running: a benchmark killed by `timeout`, a test run stopped by its CI."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

STOPPING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _children() -> list[int]:
    pid = os.getpid()
    with contextlib.suppress(OSError):
        return [
            int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        ]
    return []


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")


def _interrupt_with_children(signum: int, frame: FrameType | None) -> None:
    # passed on first: a test run's worker processes (pytest-xdist) tear their own fixtures
    # down only when they are told to
    for child in _children():
        with contextlib.suppress(OSError):
            os.kill(child, signum)
    _interrupt(signum, frame)


def unwind_on_stopping_signals(*, pass_to_children: bool = False) -> None:
    """From now on, SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread (after
    sending the signal on to this process's children, with `pass_to_children`)."""
    if threading.current_thread() is threading.main_thread():
        handler = _interrupt_with_children if pass_to_children else _interrupt
        for signum in STOPPING_SIGNALS:
            signal.signal(signum, handler)


@contextmanager
def stopped_on_signals() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP unwind it like Ctrl-C; as before after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {signum: signal.getsignal(signum) for signum in STOPPING_SIGNALS}
    unwind_on_stopping_signals()
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
