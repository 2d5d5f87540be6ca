"""What authenticating a request costs now that a revoked token must stop working within a
second on every API worker (`api.auth`).

On a PostgreSQL database of its own (and on SQLite in a temporary file), with one user in
three teams:

(a) `hit_us_p50`: `authenticate` answered from the process's cache, as most requests are.
(b) `lookup_ms_p50/p95`: the same with the cache emptied first: the token's row and user,
    and the user's teams, read from the database (what every request would cost with no
    cache at all).
(c) `lookups_per_s_per_token_per_worker`: at most 1 / `CACHE_TTL_S` for a token in
    constant use, so `db_ms_per_s_per_token_per_worker` = that times the lookup: the
    database time the bound on revocation costs. Baseline in the same run: the 30 s cache
    this replaced (`old_db_ms_per_s_per_token_per_worker`).
(d) `redis_get_ms_p50`: one Redis GET, what the other design (a revocation epoch in Redis
    checked on every request) would add to every request, cached or not.

Options: `--rounds`. Prints progress, then the FINAL JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from api.auth import CACHE_TTL_S, TokenCache, authenticate
from api.state import ApiState
from bench._bench_postgres import BenchPostgres
from bench._bench_redis import BenchRedis
from bench._latency_stats import median, percentile, rounded
from bench._small import parse_with_small
from storage import teams
from storage.db import make_engine, make_sessionmaker
from storage.migrate import upgrade
from storage.roles import Role
from storage.users import create_user

OLD_CACHE_TTL_S = 30.0


class _Sessions:
    """What `authenticate` uses of the API's state."""

    def __init__(self, url: str) -> None:
        self.engine = make_engine(url)
        self.sessions = make_sessionmaker(self.engine)
        self.tokens = TokenCache()


async def _user_with_teams(state: _Sessions) -> str:
    async with state.sessions() as session:
        user, token = await create_user(session, f"bench-{time.monotonic_ns()}")
        for n in range(2):
            team = await teams.create_team(session, f"bench-team-{n}-{time.monotonic_ns()}")
            await teams.add_member(session, team.id, user.id, Role.MEMBER)
        await session.commit()
    return token


async def _measure(url: str, rounds: int) -> dict[str, Any]:
    upgrade(url)
    state = _Sessions(url)
    as_api: Any = state  # authenticate reads only sessions and tokens
    api_state: ApiState = as_api
    try:
        header = f"Bearer {await _user_with_teams(state)}"
        await authenticate(header, api_state)
        hits, lookups = [], []
        for _ in range(rounds):
            started = time.perf_counter()
            await authenticate(header, api_state)
            hits.append(time.perf_counter() - started)
            state.tokens = TokenCache()
            started = time.perf_counter()
            await authenticate(header, api_state)
            lookups.append(time.perf_counter() - started)
    finally:
        await state.engine.dispose()
    lookup_ms = median(lookups) * 1000
    return {
        "hit_us_p50": rounded(median(hits) * 1e6),
        "lookup_ms_p50": rounded(lookup_ms),
        "lookup_ms_p95": rounded(percentile(lookups, 95) * 1000),
        "lookups_per_s_per_token_per_worker": rounded(1 / CACHE_TTL_S),
        "db_ms_per_s_per_token_per_worker": rounded(lookup_ms / CACHE_TTL_S),
        "old_db_ms_per_s_per_token_per_worker": rounded(lookup_ms / OLD_CACHE_TTL_S),
    }


def _redis_get_ms(url: str, rounds: int) -> float:
    import redis

    client = redis.Redis.from_url(url)
    client.set("dlaas:bench:epoch", 1)
    took = []
    for _ in range(rounds):
        started = time.perf_counter()
        client.get("dlaas:bench:epoch")
        took.append(time.perf_counter() - started)
    client.close()
    return median(took) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.token_auth")
    parser.add_argument("--rounds", type=int, default=500)
    args = parse_with_small(parser, {"rounds": 30})
    final: dict[str, Any] = {"bench": "token_auth", "cache_ttl_s": CACHE_TTL_S}
    with BenchPostgres() as database, BenchRedis() as redis_db:
        print("postgres ...", flush=True)
        final["postgres"] = asyncio.run(_measure(database.url, args.rounds))
        with tempfile.TemporaryDirectory() as tmp:
            print("sqlite ...", flush=True)
            sqlite_url = f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}"
            final["sqlite"] = asyncio.run(_measure(sqlite_url, args.rounds))
        final["redis_get_ms_p50"] = rounded(_redis_get_ms(redis_db.url, args.rounds))
    print(json.dumps(final), flush=True)


if __name__ == "__main__":
    main()
