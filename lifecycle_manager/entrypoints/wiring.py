"""How a lifecycle manager process opens its `Context`: the database engine, the cluster
backend its settings name, Redis, the object store, and restarts handed to the workers."""

from __future__ import annotations

from lifecycle_manager.backends import open_backend
from lifecycle_manager.glue.context import Context, Timings
from lifecycle_manager.glue.task_dispatch import TaskDispatcher
from storage import streams
from storage.db import make_engine, make_sessionmaker
from storage.object_store import open_object_store
from storage.settings import Settings


def open_context(settings: Settings, timings: Timings | None = None) -> Context:
    engine = make_engine(settings.database_url, pool_size=2)
    tasks = TaskDispatcher(settings.redis_url)
    return Context(
        settings=settings,
        engine=engine,
        sessions=make_sessionmaker(engine),
        backend=open_backend(settings),
        redis=streams.async_client(settings.redis_url),
        objects=open_object_store(settings),
        schedule_recovery=tasks.recover,
        request_pass=tasks.schedule,
        timings=timings or Timings(),
    )
