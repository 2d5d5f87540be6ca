"""The learner pod's `fetch` init container: the DOWNLOADING phase, with the job's credentials.

It says DOWNLOADING, fetches what the command needs into the shared directory
(`learner_image.fetch_phase`) and leaves the shipper its start record. A fetch that fails,
or is stopped, ends the learner here as the runner would: a line in the log, the log
stored, the exit report (its termination message) and the exit event; the pod then fails.
"""

from __future__ import annotations

from collections.abc import Mapping

from learner_image.learner_log import LearnerLog
from learner_image.pod import StopSignal
from learner_image.pod.handoff import leave_start
from learner_image.runner_config import RunnerConfig, RunnerFailure


def run(config: RunnerConfig, environ: Mapping[str, str]) -> int:
    from learner_image.connections import connect_reporter, open_store, settings_of
    from learner_image.fetch_phase import fetch_all
    from learner_image.shipping import Shipper
    from storage.object_store import ObjectStore

    stop = StopSignal()
    settings = settings_of()
    reporter = connect_reporter(settings.redis_url, config, downloading=True)
    store: ObjectStore | None = None
    failure = ""
    restored = None
    try:
        store = open_store(settings, environ)
        restored = fetch_all(config, store, settings, lambda: stop.signal is not None, lambda: None)
    except RunnerFailure as exc:
        failure = str(exc)
    if failure or stop.signal is not None:
        shipper = Shipper(config, reporter, store, environ, config.log_path, lambda: True)
        try:
            if failure:
                return shipper.fail(failure)
            assert stop.signal is not None
            return shipper.stopped_before_start(stop.signal)
        finally:
            shipper.close()
    log = LearnerLog(config.log_path)  # this attempt's part starts where the stored one ends
    log.close()
    assert config.runner_dir is not None, "the helpers keep their files in DLAAS_RUNNER_DIR"
    leave_start(config.runner_dir, restored, log.origin)
    return 0
