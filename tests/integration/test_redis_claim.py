"""The suite's claim on a shared Redis: a server that answers PING but refuses writes is passed
over (the suite then starts its own) instead of failing every test that needs Redis."""

from __future__ import annotations

from pathlib import Path

import redis

from tests import services


def test_a_server_refusing_writes_is_not_claimed(tmp_path: Path) -> None:
    process, url = services.start_redis(tmp_path)
    try:
        client = redis.Redis.from_url(url)
        try:
            # Writes now fail with NOREPLICAS, as they would on a read-only replica or a
            # server that cannot persist.
            client.config_set("min-replicas-to-write", 1)
            assert services.redis_answers(url)
            assert services.claim_redis_db(url) is None
            client.config_set("min-replicas-to-write", 0)
            db = services.claim_redis_db(url)
            assert db == 1
            services.release_redis_db(url, db)
        finally:
            client.close()
    finally:
        process.stop()
