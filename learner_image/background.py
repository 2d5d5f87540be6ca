"""The runner's background threads: a periodic task, and a one-off task whose result is awaited."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Generic, TypeVar


class Periodic:
    """Call `fn` every `interval` seconds in a daemon thread until stopped."""

    def __init__(
        self, name: str, interval: float, fn: Callable[[], object], at_start: bool = False
    ) -> None:
        self._stop = threading.Event()
        self._at_start = at_start
        self._interval = interval
        self._fn = fn
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        if self._at_start:
            self._call()
        while not self._stop.wait(self._interval):
            self._call()

    def _call(self) -> None:
        try:
            self._fn()
        except Exception as exc:
            print(f"dlaas-learner: {self._thread.name}: {exc}", file=sys.stderr, flush=True)

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._thread.join(timeout)


T = TypeVar("T")


class Background(Generic[T]):
    """Run `fn` in a daemon thread; `result()` waits and returns its value or raises."""

    def __init__(self, name: str, fn: Callable[[], T]) -> None:
        self._fn = fn
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._fn()
        except BaseException as exc:
            self._error = exc

    def result(self) -> T:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value
