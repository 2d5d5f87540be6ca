"""The Alembic migrations build the schema the models describe, on SQLite and PostgreSQL,
and carry an existing database forward without losing its rows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, pool, text

from storage.db import sync_url
from storage.migrate import alembic_config, upgrade
from storage.models import Base
from tests.services import PostgresServer


@pytest.fixture(params=["sqlite", "postgres"])
def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'dlaas.db'}"
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    name = server.create_database("dlaas_migrate")
    try:
        yield server.url(name)
    finally:
        server.drop_database(name)


def test_the_newest_migration_builds_what_the_models_describe(empty_database_url: str) -> None:
    upgrade(empty_database_url)
    engine = create_engine(sync_url(empty_database_url), poolclass=pool.NullPool)
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        differences = compare_metadata(context, Base.metadata)
    engine.dispose()
    assert differences == [], "a model changed without a migration: run `alembic revision`"


def test_a_database_of_the_first_schema_upgrades_with_its_rows(empty_database_url: str) -> None:
    config = alembic_config(empty_database_url)
    command.upgrade(config, "0001")
    engine = create_engine(sync_url(empty_database_url), poolclass=pool.NullPool)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO users (id, name, token_hash, is_admin, created_at) "
                "VALUES (1, 'ana', 'h', false, CURRENT_TIMESTAMP)"
            )
        )
        conn.execute(
            text(
                "INSERT INTO jobs (id, owner_id, name, state, reason, desired, learners, attempt,"
                " restarts, manifest, created_at, updated_at) VALUES ('job-1', 1, 'digits',"
                " 'RUNNING', '', 'run', 2, 1, 0, '{}', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
            )
        )
        conn.execute(
            text(
                'INSERT INTO learners (job_id, "index", attempt, state, exit_code, reason,'
                " updated_at) VALUES ('job-1', 2, 1, 'FAILED', 137, 'killed', CURRENT_TIMESTAMP)"
            )
        )

    upgrade(empty_database_url)

    with engine.connect() as conn:
        row = conn.execute(
            text("SELECT state, exit_code, reason, signal, oom_killed FROM learners")
        ).one()
    assert tuple(row) == ("FAILED", 137, "killed", None, None)

    command.downgrade(alembic_config(empty_database_url), "base")
    with engine.connect() as conn:
        assert set(inspect(conn).get_table_names()) <= {"alembic_version"}
    engine.dispose()
