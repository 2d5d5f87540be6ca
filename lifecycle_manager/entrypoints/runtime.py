"""One event loop and one `Context` per worker process, made on first use.

Celery runs tasks synchronously; the operations are async. Running them all on one
long-lived loop lets the database engine, Redis and HTTP clients (bound to a loop) live as
long as the process, instead of being rebuilt for each task by `asyncio.run`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import TypeVar

from lifecycle_manager.entrypoints.wiring import open_context
from lifecycle_manager.glue.context import Context
from storage.settings import Settings

T = TypeVar("T")


class Runtime:
    def __init__(self) -> None:
        self._pid: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ctx: Context | None = None

    def install(self, ctx: Context, loop: asyncio.AbstractEventLoop) -> None:
        """Use a given context and loop (tests)."""
        self._pid, self._ctx, self._loop = os.getpid(), ctx, loop

    def run(self, operation: Callable[[Context], Awaitable[T]]) -> T:
        if self._pid != os.getpid():  # first use, or a forked child: nothing is shared
            self._loop = asyncio.new_event_loop()
            self._ctx = open_context(Settings())
            self._pid = os.getpid()
        assert self._loop is not None and self._ctx is not None
        return self._loop.run_until_complete(operation(self._ctx))

    def close(self) -> None:
        if self._pid == os.getpid() and self._loop is not None and self._ctx is not None:
            self._loop.run_until_complete(self._ctx.aclose())
            self._loop.close()
        self._pid = self._loop = self._ctx = None


runtime = Runtime()
