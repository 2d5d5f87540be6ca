"""The Celery beat's scheduler: the persistent one, refreshing the liveness heartbeat
(`DLAAS_LIVENESS_FILE`) at every tick, so a probe can tell a beat that hangs or died.

    celery -A lifecycle_manager.entrypoints.celery_app:app beat \\
        --scheduler lifecycle_manager.entrypoints.beat:HeartbeatScheduler

With the reconcile due every few seconds, the beat ticks at least that often.
"""

from __future__ import annotations

from typing import Any

from celery.beat import PersistentScheduler

from lifecycle_manager.liveness import Heartbeat
from storage.settings import Settings


class HeartbeatScheduler(PersistentScheduler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.heartbeat = Heartbeat(Settings().liveness_file)
        super().__init__(*args, **kwargs)

    def tick(self, *args: Any, **kwargs: Any) -> float:
        delay: float = super().tick(*args, **kwargs)
        self.heartbeat.beat()
        return delay
