"""The Alembic migrations build the schema the models describe, on SQLite and PostgreSQL,
and carry an existing database forward without losing its rows (or its users' tokens)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, create_engine, inspect, pool, text

from storage.api_tokens import hash_token
from storage.db import make_engine, make_sessionmaker, sync_url
from storage.migrate import alembic_config, upgrade
from storage.models import Base
from storage.team_quotas import TeamQuota, set_team_quota, team_quotas
from storage.users import user_by_token
from tests.postgres import PostgresServer


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


def _at_revision(database_url: str, revision: str) -> Engine:
    """The database migrated up to `revision`, and an engine on it."""
    command.upgrade(alembic_config(database_url), revision)
    return create_engine(sync_url(database_url), poolclass=pool.NullPool)


def test_0009_gives_each_user_a_team_of_their_own_and_keeps_their_token(
    empty_database_url: str,
) -> None:
    config = alembic_config(empty_database_url)
    engine = _at_revision(empty_database_url, "0008")
    token = "dlaas_a-token-from-before-teams"
    with engine.begin() as conn:
        for user_id, name, token_hash in ((1, "ana", hash_token(token)), (2, "bo", "b" * 64)):
            conn.execute(
                text(
                    "INSERT INTO users (id, name, token_hash, is_admin, created_at) "
                    "VALUES (:id, :name, :hash, false, CURRENT_TIMESTAMP)"
                ),
                {"id": user_id, "name": name, "hash": token_hash},
            )
        for job_id, owner in (("job-a", 1), ("job-b", 2), ("job-c", 1)):
            conn.execute(
                text(
                    "INSERT INTO jobs (id, owner_id, name, state, reason, desired, learners,"
                    " attempt, restarts, manifest, created_at, updated_at, results_bytes)"
                    " VALUES (:id, :owner, 'j', 'RUNNING', '', 'run', 1, 1, 0, '{}',"
                    " CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, 0)"
                ),
                {"id": job_id, "owner": owner},
            )

    upgrade(empty_database_url)

    with engine.connect() as conn:
        teams = conn.execute(
            text("SELECT id, name, personal_user_id FROM teams ORDER BY name")
        ).all()
        assert [(name, user) for _, name, user in teams] == [("ana", 1), ("bo", 2)]
        team_of = {user: team_id for team_id, _, user in teams}
        roles = conn.execute(text("SELECT team_id, user_id, role FROM memberships")).all()
        assert sorted(roles) == sorted((team_of[u], u, "team_admin") for u in (1, 2))
        jobs = {job: team for job, team in conn.execute(text("SELECT id, team_id FROM jobs"))}
        assert jobs == {"job-a": team_of[1], "job-b": team_of[2], "job-c": team_of[1]}
        tokens = conn.execute(
            text("SELECT user_id, name, token_hash, revoked_at, expires_at FROM api_tokens")
        ).all()
        assert sorted(tuple(t) for t in tokens) == [
            (1, "default", hash_token(token), None, None),
            (2, "default", "b" * 64, None, None),
        ]

    async def holder() -> str | None:
        db = make_engine(empty_database_url)
        try:
            async with make_sessionmaker(db)() as session:
                user = await user_by_token(session, token)
                return None if user is None else user.name
        finally:
            await db.dispose()

    assert asyncio.run(holder()) == "ana", "a token from before teams no longer works"

    command.downgrade(config, "0008")
    with engine.connect() as conn:
        kept = conn.execute(text("SELECT name, token_hash FROM users ORDER BY name")).all()
        assert [tuple(row) for row in kept] == [("ana", hash_token(token)), ("bo", "b" * 64)]
        assert "team_id" not in {c["name"] for c in inspect(conn).get_columns("jobs")}
    engine.dispose()


def test_0010_gives_every_team_an_unlimited_quota_and_takes_it_away_again(
    empty_database_url: str,
) -> None:
    engine = _at_revision(empty_database_url, "0009")
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO teams (id, name, created_at) VALUES (1, 'vision', CURRENT_TIMESTAMP)")
        )

    upgrade(empty_database_url)

    async def quotas_then_set() -> tuple[list[TeamQuota], TeamQuota]:
        db = make_engine(empty_database_url)
        try:
            async with make_sessionmaker(db)() as session:
                before = await team_quotas(session)
                after = await set_team_quota(
                    session, "vision", gpus={"A100": 8}, millicpus=16000, weight=2.0
                )
                await session.commit()
                return before, after
        finally:
            await db.dispose()

    before, after = asyncio.run(quotas_then_set())
    none = dict.fromkeys(("gpus", "millicpus", "memory", "jobs"), None)
    borrow_none = {f"borrow_{name}": None for name in none}
    assert before == [TeamQuota("vision", **none, **borrow_none, weight=1.0, max_priority=0)]
    assert after == TeamQuota(
        "vision", **{**none, "gpus": {"A100": 8}, "millicpus": 16000}, **borrow_none, weight=2.0
    )

    command.downgrade(alembic_config(empty_database_url), "0009")
    with engine.connect() as conn:
        columns = {c["name"] for c in inspect(conn).get_columns("teams")}
        assert columns == {"id", "name", "personal_user_id", "created_at"}
        assert conn.execute(text("SELECT name FROM teams")).scalar_one() == "vision"
    engine.dispose()
