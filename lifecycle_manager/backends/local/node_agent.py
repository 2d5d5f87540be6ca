"""The node agent: the local stand-in for a kubelet, owning the learner processes of a machine.

    python -m lifecycle_manager.backends.local.node_agent [--host ADDRESS] [--port 8471] --root DIR
        [--grace 30] [--keep-workdirs]

Environment: `DLAAS_REDIS_URL` (where learner exits are reported: an `exit` event on
`dlaas:learner-events` with `source=agent`, `deleted=1` when the agent stopped the learner
on request, and what the runner's exit report says: `stopped=1` when it was told to stop,
the program's `last_line`); `DLAAS_AGENT_TOKEN` or `DLAAS_AGENT_TOKEN_FILE` (required);
`DLAAS_AGENT_BIND` (the default of `--host`: 127.0.0.1); `DLAAS_AGENT_ALLOWED_HOSTS`. That
is all it needs: learners get everything else from their spec. The agent outlives
lifecycle-manager workers; started again, it re-adopts the learners it started before.

It starts whatever command it is given, so it answers no one but the lifecycle manager:
every request must carry `Authorization: Bearer TOKEN` (else 401, compared in constant
time), and name in its Host header one of the agent's own addresses, `127.0.0.1`,
`localhost` or `[::1]` with its port, its bind address, or a name of
`DLAAS_AGENT_ALLOWED_HOSTS` (else 421), so a web page that rebinds a DNS name to the agent's
address cannot drive it through a browser on the machine.

HTTP (JSON):
- `PUT /learners/{name}` body `LearnerRequest` -> 201 started, 200 already there (idempotent)
- `DELETE /learners/{name}?grace=S&wait=S`, `DELETE /jobs/{job}?grace=S&wait=S` and
  `DELETE /jobs/{job}/learners/{n}?grace=S&wait=S` (learner n of every attempt), both with
  `&up_to_attempt=A` to spare attempts newer than A: SIGTERM the process group, SIGKILL
  after the grace; with `wait`, answer once they are gone (or the wait ran out):
  `{"deleted": [names], "gone": bool}`
- `GET /learners[?job=J]` -> `{"learners": [...]}`, `GET /healthz`
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import hashlib
import hmac
import logging
import os
import socket
import stat
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Query, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from redis.exceptions import RedisError
from starlette.types import ASGIApp, Receive, Scope, Send

from learner_image import program_sandbox
from lifecycle_manager.backends.base import LearnerSpec, Resources, learner_name
from lifecycle_manager.backends.local.agent_learners import LearnerRecord, LearnerTable
from lifecycle_manager.backends.local.client import AgentTokenError, agent_token
from storage import streams
from storage.http_server import serve
from storage.settings import Settings

log = logging.getLogger("dlaas.node_agent")

REPORT_RETRY_S = 2.0
MIN_TOKEN_LENGTH = 32
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
WILDCARD_ADDRESSES = ("", "0.0.0.0", "::")


def allowed_hosts(bind: str, port: int, names: Iterable[str] = ()) -> frozenset[str]:
    """The Host header values the agent answers: each loopback name, its bind address and
    every name given, with its port (a name given with a port of its own keeps that)."""
    hosts = set()
    extra = [name.strip().lower() for name in names if name.strip()]
    for name in [*LOOPBACK_NAMES, *([] if bind in WILDCARD_ADDRESSES else [bind]), *extra]:
        if name.startswith("["):
            hosts.add(name if "]:" in name else f"{name}:{port}")
        elif name.count(":") == 1:
            hosts.add(name)  # host:port
        elif ":" in name:
            hosts.add(f"[{name}]:{port}")  # an IPv6 address
        else:
            hosts.add(f"{name}:{port}")
    return frozenset(hosts)


class AgentGuard:
    """ASGI middleware: a request without the agent's bearer token is answered 401, one whose
    Host header is not one of `hosts` 421, before anything of the app runs."""

    def __init__(self, app: ASGIApp, *, token: str, hosts: frozenset[str]) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()
        self._hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1008})
            return
        authorization = _header(scope, b"authorization")
        host = _header(scope, b"host").decode("latin-1").lower()
        if not hmac.compare_digest(authorization, self._expected):
            refusal = JSONResponse(
                {"error": "unauthorized", "detail": "Authorization: the agent's token is required"},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        elif host not in self._hosts:
            refusal = JSONResponse(
                {
                    "error": "misdirected",
                    "detail": f"Host: {host!r} is not an address of this node agent "
                    "(DLAAS_AGENT_ALLOWED_HOSTS names more)",
                },
                status_code=421,
            )
        else:
            await self.app(scope, receive, send)
            return
        await refusal(scope, receive, send)


def _header(scope: Scope, name: bytes) -> bytes:
    """The first value of header `name` (lower case), or b"" without one."""
    for key, value in scope["headers"]:
        if key.lower() == name:
            return bytes(value)
    return b""


class ResourcesBody(BaseModel):
    cpus: float | None = Field(default=None, gt=0)
    memory_bytes: int | None = Field(default=None, gt=0)
    gpus: int = Field(default=0, ge=0)


class LearnerRequest(BaseModel):
    job: str = Field(min_length=1, max_length=100)
    learner: int = Field(ge=1)
    attempt: int = Field(ge=0)
    num_learners: int = Field(ge=1)
    command: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    program_env: dict[str, str] = Field(default_factory=dict)  # for the user's program alone
    resources: ResourcesBody = Field(default_factory=ResourcesBody)

    def spec(self) -> LearnerSpec:
        return LearnerSpec(
            job_id=self.job,
            learner=self.learner,
            attempt=self.attempt,
            num_learners=self.num_learners,
            command=self.command,
            env=self.env,
            program_env=self.program_env,
            resources=Resources(**self.resources.model_dump()),
        )


class ExitReporter:
    """Publishes each learner exit to the learner-events stream."""

    def __init__(self, redis_url: str) -> None:
        self._redis = streams.client(redis_url, socket_timeout=2, socket_connect_timeout=2)

    def announce_isolation(self, node: str, isolated: bool, why: str) -> None:
        try:
            streams.record_node_isolation(self._redis, node, isolated, why)
        except RedisError as error:
            log.debug("could not record this node's isolation yet: %s", error)

    def __call__(self, record: LearnerRecord) -> bool:
        event = streams.exit_event(
            record.job,
            record.learner,
            record.attempt,
            record.exit_code,
            record.signal,
            record.reason,
            time=record.finished_at,
        )
        extra = {
            "source": "agent",
            "deleted": "1" if record.deleting else "0",
            "stopped": "1" if record.stopped else "0",
            "last_line": record.last_line,
        }
        streams.publish_learner_event(
            self._redis, dataclasses.replace(event, fields={**event.fields, **extra})
        )
        return True


def create_app(
    table: LearnerTable,
    *,
    token: str,
    hosts: frozenset[str],
    on_shutdown: Callable[[], None] | None = None,
) -> FastAPI:
    """The agent's HTTP API; only requests with `token` that name one of `hosts` reach it.
    `on_shutdown` runs (in a thread) as the server stops, before the process exits."""

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        if on_shutdown is not None:
            await asyncio.to_thread(on_shutdown)

    app = FastAPI(
        title="dlaas node agent",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        lifespan=lifespan,
    )
    app.add_middleware(AgentGuard, token=token, hosts=hosts)

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"ok": True, "learners": len(table.records())}

    @app.get("/learners")
    def list_learners(job: str | None = None) -> dict[str, Any]:
        return {"learners": [record.public() for record in table.records(job)]}

    @app.put("/learners/{name}")
    def put_learner(name: str, body: LearnerRequest, response: Response) -> Any:
        expected = learner_name(body.job, body.learner, body.attempt)
        if name != expected:
            return JSONResponse(
                {"error": "invalid", "detail": f"name: a learner of this body is {expected}"},
                status_code=422,
            )
        record, created = table.create(body.spec())
        response.status_code = 201 if created else 200
        return record.public()

    @app.delete("/learners/{name}")
    def delete_learner(
        name: str,
        grace: Annotated[float | None, Query(ge=0)] = None,
        wait: Annotated[float, Query(ge=0, le=600)] = 0.0,
    ) -> dict[str, Any]:
        return _delete(table, [name], grace, wait)

    @app.delete("/jobs/{job}")
    def delete_job(
        job: str,
        grace: Annotated[float | None, Query(ge=0)] = None,
        wait: Annotated[float, Query(ge=0, le=600)] = 0.0,
        up_to_attempt: Annotated[int | None, Query(ge=0)] = None,
    ) -> dict[str, Any]:
        records = [r for r in table.records(job) if _up_to(r.attempt, up_to_attempt)]
        return _delete(table, [record.name for record in records], grace, wait)

    @app.delete("/jobs/{job}/learners/{learner}")
    def delete_job_learner(
        job: str,
        learner: int,
        grace: Annotated[float | None, Query(ge=0)] = None,
        wait: Annotated[float, Query(ge=0, le=600)] = 0.0,
        up_to_attempt: Annotated[int | None, Query(ge=0)] = None,
    ) -> dict[str, Any]:
        names = [
            record.name
            for record in table.records(job)
            if record.learner == learner and _up_to(record.attempt, up_to_attempt)
        ]
        return _delete(table, names, grace, wait)

    return app


def _up_to(attempt: int, up_to_attempt: int | None) -> bool:
    return up_to_attempt is None or attempt <= up_to_attempt


def _delete(
    table: LearnerTable, names: list[str], grace: float | None, wait: float
) -> dict[str, Any]:
    deleted = table.delete(names, grace=grace)
    gone = table.wait_gone(deleted, wait) if wait else not any(table.get(n) for n in deleted)
    return {"deleted": deleted, "gone": gone}


def _retry_reports(
    table: LearnerTable, stop: threading.Event, announce: Callable[[], None]
) -> None:
    while not stop.wait(REPORT_RETRY_S):
        table.report_pending()
        announce()


PRIVATE_VIEW = ", each with private /tmp, /var/tmp, /dev/shm and /proc, and its job's own network"


@dataclasses.dataclass(frozen=True)
class NodeIsolation:
    """How the agent runs learners' programs: as uids of their own (`isolating`), each in a
    mount namespace of its own (`private_mounts`), and why (for its log and `dlaas up`)."""

    isolating: bool
    private_mounts: bool
    why: str


def isolation(mode: str) -> NodeIsolation:
    """Whether learners' programs get uids of their own, and why. Where dlaas's interpreter
    sits in a directory other uids cannot enter (a pyenv or a venv under root's home), a
    program's own namespace shows them that interpreter and nothing else beside it."""
    if mode == "off":
        return NodeIsolation(
            False, False, "run as the agent's own user (DLAAS_AGENT_ISOLATION=off)"
        )
    if os.geteuid() != 0:
        return NodeIsolation(
            False, False, "run as the agent's own user: uids of their own need the agent to be root"
        )
    interpreter = Path(sys.executable).resolve()
    reveal = program_sandbox.revealed(program_sandbox.interpreter_paths())
    open_to_programs = reveal == () and program_sandbox.enterable_by_others(
        (interpreter, *interpreter.parents)
    )
    refused = program_sandbox.probe(reveal or ())
    if reveal is not None and refused is None:
        shown = ""
        if reveal:
            closed = ", ".join(sorted({str(c) for c, _p in reveal}))
            shown = f"; dlaas's Python is shown to them read-only, and nothing else of {closed}"
        return NodeIsolation(True, True, f"run as uids of their own{PRIVATE_VIEW}{shown}")
    if open_to_programs or mode == "on":  # told to: the jobs bring their own Python
        if refused is None:
            return NodeIsolation(True, True, f"run as uids of their own{PRIVATE_VIEW}")
        why = (
            "run as uids of their own, sharing /tmp, /var/tmp and /dev/shm and seeing every "
            f"process: {refused}"
        )
        return NodeIsolation(True, False, why)
    cannot = refused or "a directory on the way is closed to them itself"
    return NodeIsolation(
        False,
        False,
        f"run as root: other users cannot run {interpreter}, and it cannot be shown to "
        f"them in a namespace of their own ({cannot}); install Python where every user "
        "may run it, as the learner image does",
    )


def traversable_work_root(root: Path) -> Path:
    """Where learners' working directories go when `root` (a 0700 DLAAS_HOME, say) is closed
    to their programs' uids: a root-owned directory in the system's temporary directory that
    they can traverse but not list. One of that name someone else made is refused."""
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:12]
    work_root = Path(tempfile.gettempdir()) / f"dlaas-learners-{digest}"
    with contextlib.suppress(FileExistsError):
        work_root.mkdir(mode=0o711)
    info = work_root.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0:
        raise SystemExit(f"{work_root} exists and is not root's own directory: remove it")
    work_root.chmod(0o711)
    log.info("learners' working directories go to %s (%s is closed to them)", work_root, root)
    return work_root


LEARNER_GRACE_S = 30.0


def stop_every_learner(table: LearnerTable, grace: float) -> None:
    """SIGTERM every running learner and wait, up to the grace, for them to be gone."""
    running = [record.name for record in table.records() if not record.finished]
    if not running:
        return
    log.info("stopping %d learners before the agent exits", len(running))
    table.delete(running, grace=grace)
    table.wait_gone(running, grace + 5.0)


def main(argv: list[str] | None = None) -> None:
    settings = Settings()
    parser = argparse.ArgumentParser(prog="python -m lifecycle_manager.backends.local.node_agent")
    parser.add_argument(
        "--host", default=settings.agent_bind, help="address to listen on (DLAAS_AGENT_BIND)"
    )
    parser.add_argument("--port", type=int, default=8471)
    parser.add_argument("--root", type=Path, required=True, help="learner working directories")
    parser.add_argument(
        "--grace", type=float, default=LEARNER_GRACE_S, help="seconds from SIGTERM to KILL"
    )
    parser.add_argument("--keep-workdirs", action="store_true", help="keep deleted learners' dirs")
    parser.add_argument(
        "--work-root",
        type=Path,
        default=settings.agent_work_dir,
        help="where learners' working directories go (DLAAS_AGENT_WORK_DIR; default: --root)",
    )
    args = parser.parse_args(argv)
    try:
        token = agent_token(settings)
    except AgentTokenError as error:
        parser.error(str(error))
    if token is None:
        parser.error(
            "the node agent requires a token: set DLAAS_AGENT_TOKEN, or DLAAS_AGENT_TOKEN_FILE "
            "to a file holding it (`dlaas up` writes one; `openssl rand -hex 32` makes one)"
        )
    if len(token) < MIN_TOKEN_LENGTH:
        parser.error(
            f"the node agent's token is shorter than {MIN_TOKEN_LENGTH} characters: "
            "generate one with `openssl rand -hex 32`"
        )
    hosts = allowed_hosts(args.host, args.port, settings.agent_allowed_hosts.split(","))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    root = args.root.resolve()
    work_root = (args.work_root or root).resolve()
    program_uids = None
    node_isolation = isolation(settings.agent_isolation)
    isolating, why = node_isolation.isolating, node_isolation.why
    if settings.agent_isolation == "on" and not isolating:
        parser.error(f"DLAAS_AGENT_ISOLATION=on, but {why}")
    private_mounts = node_isolation.private_mounts
    log.info("learners' programs %s", why)
    if isolating:
        base = settings.agent_program_uid_base
        program_uids = range(base, base + settings.agent_program_uids)
        closed = program_sandbox.untraversable(work_root)
        if closed is not None and args.work_root is not None:
            parser.error(
                f"learners' programs run as uids of their own and could not reach "
                f"{work_root}: {closed} is not traversable by others; give a --work-root "
                "(DLAAS_AGENT_WORK_DIR) outside it"
            )
        if closed is not None:
            work_root = traversable_work_root(root)
    reporter = ExitReporter(settings.redis_url)
    table = LearnerTable(
        root,
        reporter,
        grace=args.grace,
        keep_workdirs=args.keep_workdirs,
        program_uids=program_uids,
        work_root=work_root,
        private_mounts=private_mounts,
    )
    table.load()
    stop = threading.Event()
    node = socket.gethostname()

    def announce() -> None:
        # Kept up to date in Redis (which may restart without its data): the API warns those
        # it makes users for when a node runs every job as one OS user.
        reporter.announce_isolation(node, isolating, f"learners' programs {why}")

    announce()
    threading.Thread(target=_retry_reports, args=(table, stop, announce), daemon=True).start()
    try:
        on_shutdown = None
        if settings.agent_stop_learners_on_exit:
            on_shutdown = functools.partial(stop_every_learner, table, args.grace)
        app = create_app(table, token=token, hosts=hosts, on_shutdown=on_shutdown)
        serve(app, host=args.host, port=args.port, log_level="warning")
    finally:
        stop.set()


if __name__ == "__main__":
    main()
