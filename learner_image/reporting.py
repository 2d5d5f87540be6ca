"""The learner's connection to the control plane's streams (`learner_image.reporter`), made
by whichever part of the learner reports: the runner, or a learner pod's helpers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from learner_image.runner_config import RunnerConfig, RunnerFailure

if TYPE_CHECKING:
    from learner_image.reporter import Reporter


def connect_reporter(redis_url: str, config: RunnerConfig, *, downloading: bool) -> Reporter:
    """A reporter for this learner, having said DOWNLOADING if asked (RunnerFailure if Redis
    cannot be reached)."""
    from learner_image.reporter import connect

    try:
        reporter = connect(redis_url, config.job_id, config.learner, config.attempt)
        if downloading:
            reporter.status("DOWNLOADING")
    except Exception as exc:
        raise RunnerFailure(f"could not reach Redis at {redis_url}: {exc}") from exc
    return reporter
