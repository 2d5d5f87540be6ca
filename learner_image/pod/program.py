"""The learner pod's `program` container: the user's command, and not one credential.

The command runs as the runner runs it (`learner_image.launcher`), its output at pipe
speed into the log in the shared directory. This container tells the shipper beside it
what it needs through files there (`learner_image.pod.handoff`): that the launcher lives,
a heartbeat while no process of the command is stopped, and how the command ended. It
reaches neither Redis nor the object store. Its exit code is the learner's (the shipper's
is the one the lifecycle manager reads).
"""

from __future__ import annotations

import signal
from collections.abc import Mapping

from learner_image.background import Periodic
from learner_image.launcher import HEARTBEAT_S, Launcher, ProgramEnd, stopped_before_start
from learner_image.learner_log import LearnerLog
from learner_image.pod.handoff import ProgramSide
from learner_image.runner_config import RunnerConfig
from learner_image.shipping import EXIT_RUNNER_FAILURE


def run(config: RunnerConfig, environ: Mapping[str, str]) -> int:
    assert config.shared_dir is not None
    launcher = Launcher(config, environ)
    signal.signal(signal.SIGTERM, lambda signum, _frame: launcher.stop(signum))
    signal.signal(signal.SIGINT, lambda signum, _frame: launcher.stop(signum))
    side = ProgramSide(config.shared_dir)
    side.announce()
    log = LearnerLog(config.log_path)

    def beat() -> None:
        if not launcher.frozen():
            side.beat()

    heartbeat = Periodic("dlaas-heartbeat", HEARTBEAT_S, beat, at_start=True)
    try:
        end = _run_command(launcher, log)
    finally:
        heartbeat.stop(timeout=1.0)
        log.close()
    side.ended(end)
    if end.returncode is not None:
        return end.report().exit_code
    if end.stop_signal is not None:
        return stopped_before_start(end.stop_signal).exit_code
    return EXIT_RUNNER_FAILURE


def _run_command(launcher: Launcher, log: LearnerLog) -> ProgramEnd:
    if launcher.stop_signal is not None:
        return ProgramEnd(None, launcher.stop_signal)
    try:
        launcher.start()
    except OSError as exc:
        return ProgramEnd(None, failure=f"could not start the command: {exc}")
    return launcher.wait(log)
