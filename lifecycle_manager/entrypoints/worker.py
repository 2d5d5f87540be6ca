"""Start a lifecycle-manager worker with the reconcile schedule embedded (`-B`).

    python -m lifecycle_manager.entrypoints.worker [--no-beat] [extra celery worker options...]

One process, one task at a time (`--pool=solo`): tasks share one event loop and database
engine. Run more workers for more throughput; each may embed the beat, since the reconcile
is safe to run twice. Workers share nothing (tasks are idempotent and never revoked), so a
worker starting, or reconnecting after Redis restarted, does not spend a second syncing
with its peers (`--without-mingle --without-gossip`). Environment: the `DLAAS_*` settings.
"""

from __future__ import annotations

import logging
import os
import sys

from lifecycle_manager.entrypoints.celery_app import app
from storage.migrate import upgrade
from storage.settings import Settings


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    beat = "--no-beat" not in args
    args = [arg for arg in args if arg != "--no-beat"]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = Settings()
    settings.home.mkdir(mode=0o700, parents=True, exist_ok=True)  # the owner's alone
    upgrade(settings.database_url)
    command = [
        "worker",
        "--pool=solo",
        "--loglevel=INFO",
        f"--hostname=dlaas-lm-{os.getpid()}@%h",
        "--without-mingle",
        "--without-gossip",
        *(["--beat"] if beat else []),
        *args,
    ]
    app.worker_main(command)


if __name__ == "__main__":
    main()
