"""Bring a database to the newest schema with Alembic, safely from several processes."""

from __future__ import annotations

import fcntl
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, pool, text
from sqlalchemy.engine import make_url

from storage.db import is_sqlite, sync_url

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
# Any constant works; it only has to be the same for every dlaas process.
_PG_LOCK_KEY = 0x646C6161


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", sync_url(url).replace("%", "%%"))
    return config


def upgrade(url: str) -> None:
    """Run pending migrations; API processes starting together serialize on a lock."""
    if is_sqlite(url):
        database = make_url(sync_url(url)).database or ""
        Path(database).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(f"{database}.migrate-lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            command.upgrade(alembic_config(url), "head")
        return
    engine = create_engine(sync_url(url), poolclass=pool.NullPool)
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _PG_LOCK_KEY})
        try:
            config = alembic_config(url)
            config.attributes["connection"] = conn
            command.upgrade(config, "head")
            conn.commit()
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _PG_LOCK_KEY})
    engine.dispose()
