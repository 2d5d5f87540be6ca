"""What the parts of a learner that hold its credentials connect to: the platform's settings,
the job's objects and the control plane's streams (`learner_image.reporter`). The runner,
and a learner pod's helpers, use them; the program's part never does. Each raises
RunnerFailure with the reason for the user.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from learner_image.runner_config import RunnerConfig, RunnerFailure
from storage.job_states import LearnerState

if TYPE_CHECKING:
    from learner_image.reporter import Reporter
    from storage.object_store import ObjectStore
    from storage.settings import Settings


def settings_of() -> Settings:
    from storage.settings import Settings

    try:
        return Settings()
    except ValueError as exc:
        raise RunnerFailure(f"bad DLAAS_* settings: {exc}") from exc


def open_store(settings: Settings, environ: Mapping[str, str]) -> ObjectStore:
    from storage.object_store import open_learner_object_store

    try:
        return open_learner_object_store(settings, environ)
    except Exception as exc:
        raise RunnerFailure(f"could not open the object store: {exc}") from exc


def connect_reporter(redis_url: str, config: RunnerConfig, *, downloading: bool) -> Reporter:
    """A reporter for this learner, having said DOWNLOADING if asked, and heartbeating from
    then on (RunnerFailure if Redis cannot be reached)."""
    from learner_image.reporter import connect

    try:
        reporter = connect(redis_url, config.job_id, config.learner, config.attempt)
        if downloading:
            reporter.status(LearnerState.DOWNLOADING)
            reporter.keep_beating()
    except Exception as exc:
        raise RunnerFailure(f"could not reach Redis at {redis_url}: {exc}") from exc
    return reporter
