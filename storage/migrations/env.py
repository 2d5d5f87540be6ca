"""Alembic environment for dlaas: runs on SQLite and PostgreSQL."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from storage.models import Base

config = context.config
connection = config.attributes.get("connection")


def run() -> None:
    if connection is not None:
        _run_on(connection)
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "", poolclass=pool.NullPool)
    with engine.connect() as conn:
        _run_on(conn)


def _run_on(conn: object) -> None:
    context.configure(
        connection=conn,  # type: ignore[arg-type]
        target_metadata=Base.metadata,
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


run()
