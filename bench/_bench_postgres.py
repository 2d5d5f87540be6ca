"""A throw-away PostgreSQL database for a benchmark run.

The machine's server (127.0.0.1:5432, trust auth) gets a fresh database `dlaas_bench_<hex>`,
dropped afterwards; when that server is unreachable, a private cluster is made with initdb in
a temporary directory and stopped afterwards.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

import psycopg

MACHINE_HOST = "127.0.0.1"
MACHINE_PORT = 5432
_ADMIN_DATABASES = ("test", "postgres")
_ADMIN_USERS = ("postgres", "root")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _connect(host: str, port: int, user: str, dbname: str) -> psycopg.Connection:
    return psycopg.connect(
        host=host, port=port, user=user, dbname=dbname, autocommit=True, connect_timeout=3
    )


class BenchPostgres:
    """`with BenchPostgres() as db:` gives `db.url` (asyncpg) and `db.job_ids()`."""

    def __init__(self, *, private: bool = False) -> None:
        self.private = private
        self.name = "dlaas_bench_" + secrets.token_hex(4)
        self.host = MACHINE_HOST
        self.port = MACHINE_PORT
        self.user = ""
        self.where = ""
        self._cluster_dir: Path | None = None
        self._as_postgres: list[str] = []

    @property
    def url(self) -> str:
        return f"postgresql+asyncpg://{self.user}@{self.host}:{self.port}/{self.name}"

    def __enter__(self) -> BenchPostgres:
        if not self.private and self._use_machine_server():
            return self
        self._start_private_cluster()
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _error: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        if self._cluster_dir is None:
            with _connect(self.host, self.port, self.user, self._admin_db) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
            return
        subprocess.run(
            [*self._as_postgres, self._bin("pg_ctl"), "-D", str(self._cluster_dir), "-m", "fast",
             "-w", "stop"],
            check=False,
            capture_output=True,
        )  # fmt: skip
        shutil.rmtree(self._cluster_dir.parent, ignore_errors=True)

    def job_ids(self) -> set[str]:
        with _connect(self.host, self.port, self.user, self.name) as conn:
            return {row[0] for row in conn.execute("SELECT id FROM jobs")}

    def _use_machine_server(self) -> bool:
        for user in _ADMIN_USERS:
            for dbname in _ADMIN_DATABASES:
                try:
                    with _connect(MACHINE_HOST, MACHINE_PORT, user, dbname) as conn:
                        conn.execute(f'CREATE DATABASE "{self.name}"')
                except psycopg.OperationalError:
                    continue
                self.user, self._admin_db = user, dbname
                self.where = f"machine server {MACHINE_HOST}:{MACHINE_PORT}"
                return True
        return False

    @staticmethod
    def _bin(name: str) -> str:
        found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
        if found:
            return found[-1]
        on_path = shutil.which(name)
        if on_path is None:
            raise RuntimeError(f"no PostgreSQL server binaries ({name}) on this machine")
        return on_path

    def _start_private_cluster(self) -> None:
        base = Path(tempfile.mkdtemp(prefix="dlaas-bench-pg-"))
        data = base / "data"
        if os.geteuid() == 0:  # initdb refuses to run as root
            self._as_postgres = ["runuser", "-u", "postgres", "--"]
            shutil.chown(base, "postgres")
        self._cluster_dir = data
        self.port = _free_port()
        self.user = "postgres"
        subprocess.run(
            [*self._as_postgres, self._bin("initdb"), "-A", "trust", "-U", "postgres", "-D",
             str(data)],
            check=True,
            capture_output=True,
        )  # fmt: skip
        subprocess.run(
            [*self._as_postgres, self._bin("pg_ctl"), "-D", str(data), "-l", str(base / "pg.log"),
             "-o", f"-p {self.port} -k {base} -c listen_addresses=127.0.0.1", "-w", "start"],
            check=True,
            capture_output=True,
        )  # fmt: skip
        self._admin_db = "postgres"
        with _connect(self.host, self.port, self.user, "postgres") as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"')
        self.where = f"private cluster {data} on port {self.port}"
