"""Isolation of a job's objects: what minting a job's credentials costs, how long they outlive
the job, and whether a job's token reaches anything beyond its own objects.

Starts the API as a real server (`python -m api`) on a fresh PostgreSQL database and a Redis
database (as `bench/api_load.py` does), with a local object store. Two users each upload
two data containers; user A submits jobs naming her container `digits`, user B one naming
his own `digits`. Then:

(a) `mint_ms_p50`, `mint_ms_p95`: a transaction that mints one job's token (what a deploy
    adds: a random token, its hash inserted, the commit), N times (default 200).
(b) `escape_attempts`, `escapes`: with one job's token, through the object gateway client
    the runner uses (`storage.object_store.gateway`), every way out of the job's reach the
    object store part offers: another job's objects (read, list, size, overwrite, delete),
    the owner's other container, another user's data, writing or deleting its own data
    container, '..' and absolute keys, prefixes that only look like its own, a user's token
    on the gateway, the job's token on the user API, and the token after its job ended. An
    attempt that is not refused is an escape (and is named in `escaped`). The same token's
    own reads and writes, and its data container's reads, must work (`own_access_ok`).
(c) `credential_lifetime_after_end_s`: for jobs ended (failed, completed, halted, deleted),
    the longest time from the end being committed until the job's token is refused,
    polling every 20 ms. Target: at most 5 s (the gateway trusts a validated token for
    `CREDENTIAL_CACHE_S`).
(d) On the node (`bench/_node_escapes.py`, as root): the embedded platform started as a new
    user starts it (`dlaas up`, no setting), and again with `DLAAS_AGENT_ISOLATION=on`; in
    each, hostile jobs try every way out the node offers them (the platform's files and
    processes, the manifest's environment aimed at the platform's own processes, files
    planted across jobs and under reused uids, shared memory, other jobs' /proc and
    loopback services). Their attempts count in `escape_attempts` and `escapes` with the
    object store's; `node_modes` gives each mode's. Target: 0 escapes.

Options: `--mints`, `--ends`, `--node-modes` (default, on; none to skip), `--small` (20
mints, 4 ends, the default mode alone). Prints progress, then the FINAL JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from api.routes.job_objects import CREDENTIAL_CACHE_S
from bench._bench_api_server import BenchApiServer, api_env
from bench._bench_postgres import BenchPostgres
from bench._bench_redis import BenchRedis
from bench._latency_stats import median, percentile, rounded
from bench._node_escapes import NodeRun, node_escapes
from bench._small import parse_with_small
from storage import job_credentials
from storage import jobs as repo
from storage.db import make_engine, make_sessionmaker
from storage.job_states import JobState
from storage.object_store.gateway import GatewayObjectStore
from tests.integration.api_harness import MODEL_ZIP

MANIFEST = b"""
name: isolated
learners: 1
framework:
  name: pytorch
  command: python train.py
data_stores:
  - id: store
    training_data: {container: digits}
"""
LIFETIME_TARGET_S = 5.0
NODE_MODES = {
    "default": {},
    "on": {"DLAAS_AGENT_ISOLATION": "on"},
    # the control (not run by default): a node that isolates nothing, where they must escape
    "shared": {"DLAAS_AGENT_ISOLATION": "off", "DLAAS_ALLOW_SHARED_NODES": "1"},
}


class Api:
    def __init__(self, url: str, admin_token: str) -> None:
        self.url = url
        self.admin = admin_token

    def call(self, token: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"}
        return httpx.request(method, self.url + path, headers=headers, timeout=30, **kwargs)

    def new_user(self) -> str:
        answer = self.call(
            self.admin, "POST", "/v2/users", json={"name": "iso-" + secrets.token_hex(4)}
        )
        answer.raise_for_status()
        return str(answer.json()["token"])

    def submit(self, token: str) -> str:
        answer = self.call(
            token,
            "POST",
            "/v2/jobs",
            files={
                "manifest": ("manifest.yml", MANIFEST, "application/x-yaml"),
                "model": ("model.zip", MODEL_ZIP, "application/zip"),
            },
        )
        answer.raise_for_status()
        return str(answer.json()["id"])


async def mint(sessions: Any, job_id: str) -> str:
    async with sessions() as session, session.begin():
        return await job_credentials.mint(session, job_id)


async def owner_of(sessions: Any, job_id: str) -> int:
    async with sessions() as session:
        job = await repo.get_job_any(session, job_id)
        assert job is not None
        return job.owner_id


async def end_job(sessions: Any, job_id: str, how: str) -> None:
    path = {
        "failed": [JobState.FAILED],
        "completed": [JobState.DEPLOYING, JobState.RUNNING, JobState.COMPLETED],
        "halted": [JobState.HALTED],
    }[how]
    async with sessions() as session, session.begin():
        for target in path:
            await repo.transition(session, job_id, target, f"bench: {how}")


def attempt_refused(action: Callable[[], object]) -> bool:
    try:
        action()
    except Exception:
        return True
    return False


def escape_attempts(
    api: Api, gateway: GatewayObjectStore, job: str, others: dict[str, Any]
) -> dict[str, Callable[[], object]]:
    """Every way out of one job's reach through the object store part (each must fail)."""
    sibling, stranger = others["sibling"], others["stranger"]
    alice, bob, alice_token = others["alice"], others["bob"], others["alice_token"]
    own = f"jobs/{job}/"
    ours = f"data/{alice}/digits/"

    def user_token_on_gateway() -> None:
        answer = api.call(alice_token, "GET", "/v2/job-objects", params={"prefix": own})
        if answer.status_code != 200:
            raise PermissionError(answer.status_code)

    def job_token_on(path: str) -> Callable[[], None]:
        def call() -> None:
            answer = api.call(others["token"], "GET", path)
            if answer.status_code != 200:
                raise PermissionError(answer.status_code)

        return call

    def raw(method: str, path: str) -> Callable[[], None]:
        def call() -> None:
            url = httpx.URL(api.url + "/v2/job-objects/x").copy_with(raw_path=path.encode())
            answer = gateway.client.request(method, url, content=b"x" if method == "PUT" else None)
            if answer.status_code >= 400:
                raise PermissionError(answer.status_code)

        return call

    return {
        "read another job's object": lambda: gateway.get_bytes(f"jobs/{sibling}/model.zip"),
        "read another user's job's object": lambda: gateway.get_bytes(f"jobs/{stranger}/model.zip"),
        "list another job's objects": lambda: list(gateway.list(f"jobs/{sibling}/")),
        "size of another job's object": lambda: gateway.size(f"jobs/{sibling}/model.zip"),
        "overwrite another job's object": lambda: gateway.put_bytes(
            f"jobs/{sibling}/model.zip", b"forged"
        ),
        "delete another job's objects": lambda: gateway.delete_prefix(f"jobs/{sibling}/"),
        "list every job": lambda: list(gateway.list("jobs/")),
        "list a prefix that only starts like its own": lambda: list(
            gateway.list(f"jobs/{job[:-1]}")
        ),
        "read the owner's other container": lambda: gateway.get_bytes(
            f"data/{alice}/private/train.csv"
        ),
        "list the owner's containers": lambda: list(gateway.list(f"data/{alice}/")),
        "read another user's container": lambda: gateway.get_bytes(f"data/{bob}/digits/train.csv"),
        "list all data": lambda: list(gateway.list("data/")),
        "write into its own data container": lambda: gateway.put_bytes(f"{ours}forged.csv", b"x"),
        "delete its own data container": lambda: gateway.delete_prefix(ours),
        "read with '..' (raw path)": raw(
            "GET", f"/v2/job-objects/jobs/{job}/%2E%2E/{sibling}/model.zip"
        ),
        "write with '..' (raw path)": raw(
            "PUT", f"/v2/job-objects/jobs/{job}/%2E%2E/{sibling}/model.zip"
        ),
        "delete with '..' in the prefix": lambda: gateway.client.delete(
            gateway.url, params={"prefix": f"{own}../{sibling}/"}
        ).raise_for_status(),
        "read an absolute key (raw path)": raw(
            "GET", f"/v2/job-objects/%2Fjobs/{sibling}/model.zip"
        ),
        "read the whole store": lambda: list(gateway.list("")),
        "a user's token on the gateway": user_token_on_gateway,
        "the job's token on the user API (jobs)": job_token_on("/v2/jobs"),
        "the job's token on the user API (its own job)": job_token_on(f"/v2/jobs/{job}"),
        "the job's token on the user API (data)": job_token_on("/v2/data/digits"),
    }


def own_access_ok(gateway: GatewayObjectStore, job: str, alice: int) -> bool:
    key = f"jobs/{job}/checkpoints/ckpt-1/weights.bin"
    data = secrets.token_bytes(3 * 1024 * 1024)
    gateway.put_bytes(key, data)
    ok = gateway.get_bytes(key) == data and gateway.size(key) == len(data)
    ok = ok and gateway.get_bytes(f"data/{alice}/digits/train.csv") == b"alice"
    ok = ok and gateway.delete_prefix(f"jobs/{job}/checkpoints/") == 1
    return ok


def lifetime_after_end(api: Api, gateway: GatewayObjectStore, job: str) -> float:
    start = time.monotonic()
    while time.monotonic() - start < 30:
        try:
            gateway.list_page(f"jobs/{job}/", 1)
        except PermissionError:
            return time.monotonic() - start
        time.sleep(0.02)
    return float("inf")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    admin_token = "dlaas_" + secrets.token_urlsafe(32)
    with (
        tempfile.TemporaryDirectory(prefix="dlaas-bench-isolation-") as tmp,
        BenchPostgres() as database,
        BenchRedis() as redis_db,
    ):
        base = Path(tmp)
        env = api_env(base, database.url, redis_db.url, admin_token)
        env["DLAAS_RATE_LIMIT_PER_S"] = env["DLAAS_ADDRESS_RATE_LIMIT_PER_S"] = "0"
        with BenchApiServer(1, env, base / "api.log") as server:
            api = Api(server.url, admin_token)
            alice_token, bob_token = api.new_user(), api.new_user()
            for token, who in ((alice_token, b"alice"), (bob_token, b"bob")):
                for container in ("digits", "private"):
                    answer = api.call(token, "PUT", f"/v2/data/{container}/train.csv", content=who)
                    answer.raise_for_status()
            job = api.submit(alice_token)
            sibling = api.submit(alice_token)
            stranger = api.submit(bob_token)
            engine = make_engine(database.url)
            sessions = make_sessionmaker(engine)
            try:
                alice, bob = await owner_of(sessions, job), await owner_of(sessions, stranger)
                # (a) minting
                mint_ms = []
                for _ in range(args.mints):
                    started = time.perf_counter()
                    await mint(sessions, sibling)
                    mint_ms.append((time.perf_counter() - started) * 1000)
                print(f"minted {args.mints} tokens: p50 {median(mint_ms):.2f} ms", flush=True)

                # (b) escapes
                token = await mint(sessions, job)
                gateway = GatewayObjectStore(server.url + "/v2/job-objects", token)
                own_ok = await asyncio.to_thread(own_access_ok, gateway, job, alice)
                others = {
                    "sibling": sibling,
                    "stranger": stranger,
                    "alice": alice,
                    "bob": bob,
                    "alice_token": alice_token,
                    "token": token,
                }
                attempts = escape_attempts(api, gateway, job, others)
                escaped = [
                    name
                    for name, action in attempts.items()
                    if not await asyncio.to_thread(attempt_refused, action)
                ]
                print(f"{len(attempts)} escape attempts, {len(escaped)} escaped", flush=True)

                # (c) lifetime after the end, and the ended job's token as one more escape
                lifetimes = []
                ends = ["failed", "completed", "halted", "deleted"]
                for i in range(args.ends):
                    how = ends[i % len(ends)]
                    ended = api.submit(alice_token)
                    ended_token = await mint(sessions, ended)
                    ended_gateway = GatewayObjectStore(server.url + "/v2/job-objects", ended_token)
                    await asyncio.to_thread(ended_gateway.list_page, f"jobs/{ended}/", 1)
                    if how == "deleted":
                        await asyncio.to_thread(
                            api.call, alice_token, "DELETE", f"/v2/jobs/{ended}"
                        )
                    else:
                        await end_job(sessions, ended, how)
                    lifetime = await asyncio.to_thread(
                        lifetime_after_end, api, ended_gateway, ended
                    )
                    lifetimes.append(lifetime)
                    ended_gateway.close()
                    print(f"job {how}: its token refused after {lifetime:.3f} s", flush=True)
                after_end = GatewayObjectStore(server.url + "/v2/job-objects", ended_token)
                late = "the token after its job ended"
                attempts[late] = lambda: after_end.put_bytes(f"jobs/{ended}/late.bin", b"x")
                if not await asyncio.to_thread(attempt_refused, attempts[late]):
                    escaped.append(late)
                gateway.close()
                after_end.close()
            finally:
                await engine.dispose()
    return {
        "mint_ms_p50": rounded(median(mint_ms), 3),
        "mint_ms_p95": rounded(percentile(mint_ms, 95), 3),
        "mints": args.mints,
        "own_access_ok": own_ok,
        "credential_cache_s": CREDENTIAL_CACHE_S,
        "credential_lifetime_after_end_s": rounded(max(lifetimes), 3),
        "credential_lifetime_after_end_p50_s": rounded(median(lifetimes), 3),
        "target_credential_lifetime_after_end_s": LIFETIME_TARGET_S,
        "escape_attempts": len(attempts),
        "escapes": len(escaped),
        "escaped": escaped,
    }


def node_figures(runs: list[NodeRun]) -> dict[str, Any]:
    escaped = [
        f"{run.mode}: {name}: {got}"
        for run in runs
        for name, got in run.results.items()
        if not got.startswith("blocked")
    ]
    return {
        "node_attempts": sum(len(run.results) for run in runs),
        "node_escaped": escaped,
        "node_modes": {
            run.mode: {
                "attempts": len(run.results),
                "escapes": sum(not got.startswith("blocked") for got in run.results.values()),
                "jobs": run.isolation,
                "uid_reused": run.uid_reused,
                "own_environment_reached": run.own_environment_reached,
            }
            for run in runs
        },
    }


def run_nodes(modes: list[str]) -> list[NodeRun]:
    runs = []
    for mode in modes:
        with tempfile.TemporaryDirectory(prefix=f"dlaas-bench-node-{mode}-") as work:
            Path(work).chmod(0o755)  # the jobs' manifests and archives are read as root
            runs.append(node_escapes(Path(work), mode, NODE_MODES[mode]))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mints", type=int, default=200)
    parser.add_argument("--ends", type=int, default=8)
    parser.add_argument(
        "--node-modes",
        default="default,on",
        help="the node's modes to attack: default, on, shared (a control that isolates "
        "nothing), or none (needs root)",
    )
    args = parse_with_small(parser, {"mints": 20, "ends": 4, "node_modes": "default"})
    modes = [m for m in args.node_modes.split(",") if m and m != "none"]
    unknown = sorted(set(modes) - set(NODE_MODES))
    if unknown:
        parser.error(f"--node-modes: unknown {unknown}; give some of {sorted(NODE_MODES)}")
    if modes and os.geteuid() != 0:
        print("the node's attempts need root (the node agent isolates jobs only so): skipped")
        modes = []
    figures = asyncio.run(run(args))
    nodes = node_figures(run_nodes(modes))
    figures["object_store_attempts"] = figures["escape_attempts"]
    figures["escape_attempts"] += nodes["node_attempts"]
    figures["escaped"] += nodes["node_escaped"]
    figures["escapes"] = len(figures["escaped"])
    figures["node_modes"] = nodes["node_modes"]
    figures["target_escapes"] = 0
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
