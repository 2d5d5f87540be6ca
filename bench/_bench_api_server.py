"""The dlaas API as a real server process (`python -m api`) for a benchmark run."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import httpx

_READY = b"Application startup complete"
_CLOCK_TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds a live process has used so far (0.0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICK


def api_env(base: Path, database_url: str, redis_url: str, admin_token: str) -> dict[str, str]:
    """The environment of an API server for a benchmark: this one's without its `DLAAS_*`
    settings, then a database, a Redis, objects and a home under `base`, and the admin."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("DLAAS_")},
        "DLAAS_HOME": str(base / "home"),
        "DLAAS_DATABASE_URL": database_url,
        "DLAAS_REDIS_URL": redis_url,
        "DLAAS_OBJECT_STORE": "local",
        "DLAAS_OBJECTS_DIR": str(base / "objects"),
        "DLAAS_ADMIN_TOKEN": admin_token,
    }


class BenchApiServer:
    """`with BenchApiServer(workers, env, log) as api:` serves on `api.url` until the block ends."""

    def __init__(self, workers: int, env: dict[str, str], log_path: Path) -> None:
        self.workers = workers
        self.env = env
        self.log_path = log_path
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> BenchApiServer:
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "api", "--host", "127.0.0.1", "--port", str(self.port),
                 "--workers", str(self.workers)],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        try:
            self._wait_ready(timeout_s=90)
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _error: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        self._stop()

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def worker_pids(self) -> list[int]:
        """The processes serving requests: uvicorn's workers, or the one process with 1 worker."""
        if self.workers == 1:
            return [self.pid]
        workers = []
        for child in _children_of(self.pid):
            with contextlib.suppress(OSError):
                if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                    workers.append(child)
        return sorted(workers)

    def cpu_s(self) -> float:
        """CPU seconds used so far by the serving processes."""
        return sum(process_cpu_s(pid) for pid in self.worker_pids())

    def _log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def _wait_ready(self, timeout_s: float) -> None:
        assert self._process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"the API exited at start; its log:\n{self._log_tail()}")
            ready = self.log_path.read_bytes().count(_READY)
            if ready >= self.workers and len(self.worker_pids()) == self.workers:
                try:
                    if httpx.get(self.url + "/healthz", timeout=5).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
            time.sleep(0.2)
        raise RuntimeError(
            f"the API was not ready in {timeout_s:.0f} s; its log:\n{self._log_tail()}"
        )

    def _stop(self) -> None:
        if self._process is None or self._process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGTERM)
        try:
            self._process.wait(20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait()
