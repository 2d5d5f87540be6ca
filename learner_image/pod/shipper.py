"""The learner pod's `shipper` container: RUNNING, STORING and the exit, with the job's
credentials, beside a program that has none.

It follows the log the program's container writes (`learner_image.shared_log`) and ships
it, the metrics, committed checkpoints and heartbeats (while the program's heartbeat file
is fresh) as the runner does (`learner_image.shipping`), until the program's container is
done (`learner_image.pod.handoff`); then it stores what the command left, leaves the exit
report as this container's termination message, publishes the exit event and exits with
the learner's exit code. A SIGTERM (the pod deleted: a halt, a restart) does not stop it:
the program's container was sent one too, and its end (stopped) is what is reported, the
log and the committed checkpoints stored within the pod's grace period.
"""

from __future__ import annotations

from collections.abc import Mapping

from learner_image.pod import StopSignal
from learner_image.pod.handoff import ShipperSide, read_start
from learner_image.runner_config import RunnerConfig, RunnerFailure
from learner_image.shared_log import SharedLog


def run(config: RunnerConfig, environ: Mapping[str, str]) -> int:
    from learner_image.connections import connect_reporter, open_store, settings_of
    from learner_image.shipping import Shipper
    from storage.object_store import ObjectStore

    assert config.shared_dir is not None and config.runner_dir is not None
    stop = StopSignal()
    settings = settings_of()
    reporter = connect_reporter(settings.redis_url, config, downloading=False)
    side = ShipperSide(config.shared_dir)
    store: ObjectStore | None = None
    try:
        store = open_store(settings, environ)
        restored, origin = read_start(config.runner_dir)
    except (RunnerFailure, OSError, ValueError, KeyError, TypeError) as exc:
        shipper = Shipper(config, reporter, store, environ, config.log_path, lambda: True)
        reason = exc if isinstance(exc, RunnerFailure) else f"no start record: {exc}"
        try:
            return shipper.fail(str(reason))
        finally:
            shipper.close()
    log = SharedLog(config.shared_dir, config.log_path, origin)
    shipper = Shipper(config, reporter, store, environ, log, lambda: not side.beating())
    try:
        shipper.running(restored)
        return shipper.end(side.wait_end(lambda: stop.signal))
    except Exception as exc:
        return shipper.fail(f"the learner's shipper failed: {type(exc).__name__}: {exc}")
    finally:
        shipper.close()
