"""The HTTP server of the API and of the node agent: uvicorn with read timeouts and
connection caps, so idle or trickling connections cannot take the process's open files.

`serve()` raises the soft open-file limit to the hard one, then runs uvicorn with
`GuardedHttpProtocol`: each connection must send a whole request head within
`http_header_timeout_s` of opening (or of its first byte of a later request) and, while a
body is due, some of it every `http_body_timeout_s`, else it is closed; `ConnectionTable`
decides which connections each serving process holds. Settings are read from the
environment in every serving process (uvicorn's workers are spawned with it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import resource
import time
import weakref
from asyncio import TimerHandle
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.config import Config
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from storage.connection_caps import ConnectionTable, total_connection_cap
from storage.settings import Settings

log = logging.getLogger("dlaas.http_server")

_NR_OPEN = Path("/proc/sys/fs/nr_open")
_REFUSAL_LOG_INTERVAL_S = 10.0
LISTEN_BACKLOG = 65535


def raise_open_file_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit (children inherit it);
    the soft limit in force afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:
            target = int(_NR_OPEN.read_text())
        except (OSError, ValueError):
            return soft
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError) as error:
            log.warning(
                "could not raise the open-file limit from %d to %d: %s", soft, target, error
            )
            return soft
        return target
    return soft


@dataclasses.dataclass(frozen=True)
class HttpLimits:
    header_timeout_s: float
    body_timeout_s: float
    per_address: int
    total: int
    shutdown_grace_s: int = 8

    @classmethod
    def of_process(cls, settings: Settings) -> HttpLimits:
        """The limits `settings` give a process with this process's open-file limit."""
        fd_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        return cls(
            header_timeout_s=settings.http_header_timeout_s,
            body_timeout_s=settings.http_body_timeout_s,
            per_address=settings.http_max_connections_per_address,
            shutdown_grace_s=settings.http_shutdown_grace_s,
            total=total_connection_cap(
                fd_limit, settings.http_fd_headroom, settings.http_max_connections
            ),
        )


class _ProcessGuard:
    """One serving process's limits and connections."""

    def __init__(self, limits: HttpLimits) -> None:
        self.limits = limits
        self.table: ConnectionTable[GuardedHttpProtocol] = ConnectionTable(
            per_address=limits.per_address, total=limits.total
        )
        self._refused = 0
        self._evicted = 0
        self._logged_at = 0.0

    def note(self, *, refused: str = "", evicted: bool = False) -> None:
        """Count a refusal or eviction, logging at most every few seconds (an attack makes
        thousands a second)."""
        if refused:
            self._refused += 1
        if evicted:
            self._evicted += 1
        now = time.monotonic()
        if now - self._logged_at >= _REFUSAL_LOG_INTERVAL_S:
            self._logged_at = now
            log.warning(
                "%d connections refused, %d closed to make room, since the last report "
                "(latest refusal: %s; caps: %d per address, %d in all; %d held)",
                self._refused,
                self._evicted,
                refused or "none",
                self.limits.per_address,
                self.limits.total,
                len(self.table),
            )
            self._refused = self._evicted = 0


_guards: weakref.WeakKeyDictionary[ServerState, _ProcessGuard] = weakref.WeakKeyDictionary()


_latest: tuple[ServerState, _ProcessGuard] | None = None


def _guard_of(server_state: ServerState) -> _ProcessGuard:
    global _latest
    if _latest is not None and _latest[0] is server_state:
        return _latest[1]  # every connection asks: spare it the weak dictionary
    guard = _guards.get(server_state)
    if guard is None:
        limits = HttpLimits.of_process(Settings())
        guard = _guards[server_state] = _ProcessGuard(limits)
        log.info(
            "HTTP limits: a request head within %.1f s, body bytes every %.1f s, "
            "%d connections per address, %d in all",
            limits.header_timeout_s,
            limits.body_timeout_s,
            limits.per_address,
            limits.total,
        )
    _latest = (server_state, guard)
    return guard


class _TimedFlowControl(FlowControl):
    """uvicorn's flow control, telling the protocol when reading a body is paused (the
    application is behind, the client is not at fault) and resumed."""

    def __init__(self, transport: asyncio.Transport, protocol: GuardedHttpProtocol) -> None:
        super().__init__(transport)
        self._protocol = protocol

    def pause_reading(self) -> None:
        super().pause_reading()
        self._protocol._stop_body_timer()

    def resume_reading(self) -> None:
        super().resume_reading()
        if self._protocol._in_body:
            self._protocol._start_body_timer()


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a request-head timeout, a body timeout between
    reads, and its process's connection caps."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._guard = _guard_of(server_state)
        self._admitted = False
        self._awaiting_head = True
        self._in_body = False
        self._header_timer: TimerHandle | None = None
        self._body_timer: TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.flow = _TimedFlowControl(transport, self)
        address = self.client[0] if self.client else ""
        admission = self._guard.table.admit(self, address)
        if not admission.admitted:
            self._guard.note(refused=admission.refused)
            transport.abort()
            return
        self._admitted = True
        if admission.evicted is not None:
            self._guard.note(evicted=True)
            admission.evicted._close("made room for a new connection")
        self._start_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._guard.table.release(self)
        self._admitted = False
        self._cancel_header_timer()
        self._stop_body_timer()
        self._in_body = False
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._admitted:
            return
        if self._awaiting_head and self._header_timer is None:
            self._start_header_timer()  # the first byte of a request after a keep-alive pause
        elif self._in_body:
            self._start_body_timer()
        super().data_received(data)

    def on_message_begin(self) -> None:
        if self._header_timer is None:
            self._start_header_timer()  # a pipelined request, after the one before it
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._cancel_header_timer()
        self._awaiting_head = False
        self._guard.table.request_started(self)
        self._in_body = True
        self._start_body_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._in_body = False
        self._stop_body_timer()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._admitted and (self.cycle is None or self.cycle.response_complete):
            self._awaiting_head = True
            self._guard.table.request_finished(self)

    def _start_header_timer(self) -> None:
        self._cancel_header_timer()
        self._header_timer = self.loop.call_later(
            self._guard.limits.header_timeout_s,
            self._close,
            "sent no whole request head in time",
        )

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _start_body_timer(self) -> None:
        self._stop_body_timer()
        self._body_timer = self.loop.call_later(
            self._guard.limits.body_timeout_s, self._close, "sent no body bytes in time"
        )

    def _stop_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _close(self, why: str) -> None:
        self._cancel_header_timer()
        self._stop_body_timer()
        if self.transport is not None and not self.transport.is_closing():
            log.debug("closing a connection from %s: %s", self.client, why)
            self._guard.table.release(self)
            self.transport.abort()


def serve(
    app: Any,
    *,
    host: str,
    port: int,
    workers: int = 1,
    factory: bool = False,
    access_log: bool = True,
    log_level: str = "info",
) -> None:
    """Serve `app` (an ASGI application, or an import string as uvicorn takes, required
    with more than one worker) with the limits of the `DLAAS_HTTP_*` settings."""
    fd_limit = raise_open_file_limit()
    limits = HttpLimits.of_process(Settings())  # refuses bad settings before serving
    log.info("open-file limit %d: at most %d connections per process", fd_limit, limits.total)
    uvicorn.run(
        app,
        host=host,
        port=port,
        workers=workers,
        factory=factory,
        access_log=access_log,
        log_level=log_level,
        http=GuardedHttpProtocol,
        # The kernel keeps at most net.core.somaxconn: a burst of connections waits there
        # rather than having its SYNs dropped (retried only after a second).
        backlog=LISTEN_BACKLOG,
        timeout_graceful_shutdown=limits.shutdown_grace_s,
    )
