"""What a learner tells the control plane through Redis: events, heartbeats, logs, metrics.

It signs in as its job's Redis user, which reaches only the job's own keys: events go to the
job's own stream, which the lifecycle manager relays (`lifecycle_manager.glue.event_relay`).

Key names and record encodings are `storage.streams`'; this module only sends. Publishing an
event retries for about a second and a half (a lost event is a learner the lifecycle manager
misjudges); log and metric batches are sent once (the durable files keep every line).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

import redis

from learner_image.background import Periodic
from learner_image.launcher import HEARTBEAT_S
from storage import streams
from storage.exit_reports import ExitReport

EVENT_ATTEMPTS = 5
CONNECT_ATTEMPTS = 3


class Reporter:
    def __init__(self, client: redis.Redis, job_id: str, learner: int, attempt: int) -> None:
        self.client = client
        self.job_id = job_id
        self.learner = learner
        self.attempt = attempt
        self._beats: Periodic | None = None
        self._frozen: Callable[[], bool] = lambda: False

    def keep_beating(self, frozen: Callable[[], bool] | None = None) -> None:
        """A heartbeat every `HEARTBEAT_S` from now on (from the DOWNLOADING report: a fetch
        may take longer than the heartbeat timeout), none while `frozen()` (a stopped
        program is a hung one); calling again only changes `frozen`."""
        if frozen is not None:
            self._frozen = frozen
        if self._beats is None:
            self._beats = Periodic("dlaas-heartbeat", HEARTBEAT_S, self._beat, at_start=True)

    def _beat(self) -> None:
        if not self._frozen():
            self.heartbeat()

    def stop_beating(self) -> None:
        if self._beats is not None:
            self._beats.stop(timeout=1.0)
            self._beats = None

    def publish(self, event: streams.LearnerEvent) -> None:
        for tries in range(EVENT_ATTEMPTS):
            try:
                streams.publish_job_event(self.client, event)
                return
            except redis.RedisError:
                if tries == EVENT_ATTEMPTS - 1:
                    raise
                time.sleep(0.1 * 2**tries)

    def status(self, state: str) -> None:
        self.publish(streams.status_event(self.job_id, self.learner, self.attempt, state))

    def checkpoint(self, name: str) -> None:
        self.publish(streams.checkpoint_event(self.job_id, self.learner, self.attempt, name))

    def checkpoint_failed(self, name: str, step: int, error: str) -> None:
        """A checkpoint the program asked for that could not be written."""
        event = streams.checkpoint_event(self.job_id, self.learner, self.attempt, name)
        fields = {**event.fields, "step": str(step), "failed": error[:500]}
        self.publish(dataclasses.replace(event, fields=fields))

    def restored(self, name: str) -> None:
        """The checkpoint this attempt resumes from."""
        event = streams.checkpoint_event(self.job_id, self.learner, self.attempt, name)
        self.publish(dataclasses.replace(event, fields={**event.fields, "restored": "1"}))

    def exit(self, report: ExitReport) -> None:
        """The learner's end: `report.source` is `command` (the user's command ended) or
        `runner` (the runner failed); `last_line`, the command's last output line, tells
        repeated errors apart; `stopped`: the runner was told to stop (SIGTERM/SIGINT), so
        the command did not end by itself."""
        event = streams.exit_event(
            self.job_id,
            self.learner,
            self.attempt,
            report.exit_code,
            report.signal,
            report.reason,
        )
        fields = {
            **event.fields,
            "source": report.source,
            "last_line": report.last_line[:500],
            "stopped": "1" if report.stopped else "0",
        }
        self.publish(dataclasses.replace(event, fields=fields))

    def heartbeat(self) -> None:
        streams.set_heartbeat(self.client, self.job_id, self.learner)

    def send(
        self, logs: Sequence[streams.LogBatch], metrics: Sequence[streams.MetricBatch]
    ) -> None:
        if logs:
            streams.append_logs(self.client, self.job_id, logs)
        if metrics:
            streams.append_metrics(self.client, self.job_id, metrics)


def connect(redis_url: str, job_id: str, learner: int, attempt: int) -> Reporter:
    """A reporter on a checked connection (three tries over about a second)."""
    client = streams.client(redis_url, socket_timeout=10, socket_connect_timeout=5)
    for tries in range(CONNECT_ATTEMPTS):
        try:
            client.ping()
            break
        except redis.RedisError:
            if tries == CONNECT_ATTEMPTS - 1:
                raise
            time.sleep(0.3 * (tries + 1))
    return Reporter(client, job_id, learner, attempt)
