"""A learner on Kubernetes: the runner's phases in three containers of one pod, so that the
user's program runs where no credential is.

    dlaas-learner fetch   [--job ...] -- COMMAND   init container `fetch`: DOWNLOADING
    dlaas-learner program [--job ...] -- COMMAND   container `program`: the command
    dlaas-learner ship    [--job ...] -- COMMAND   container `shipper`: RUNNING .. exit

- `fetch` (`learner_image.pod.fetch`) holds the job's credentials: it says DOWNLOADING,
  fetches the model archive, the data, the newest checkpoint and the stored log of earlier
  attempts into the shared directory, and leaves the shipper a start record.
- `program` (`learner_image.pod.program`) holds nothing: it runs the command as the runner
  does (`learner_image.launcher`), its output at pipe speed into the log in the shared
  directory, refreshes a heartbeat file while no process of the command is stopped, and
  leaves its exit status there when the command ends (`learner_image.pod.handoff`).
- `ship` (`learner_image.pod.shipper`) holds the job's credentials: it follows that log to
  the live stream, the metrics and the stored log, uploads committed checkpoints, turns
  the heartbeat file into heartbeats, and once the exit status is there stores what the
  command left (`learner_image.shipping`), publishes the exit event, leaves the exit report
  as its termination message and exits with the learner's exit code.

The shared directory is DLAAS_SHARED_DIR (the pod's `/job`); the helpers keep their own
files (the start record, the metrics file) in DLAAS_RUNNER_DIR, out of the program's reach.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Mapping, Sequence

from learner_image.runner_config import RunnerConfig, RunnerFailure, parse_config
from learner_image.shipping import EXIT_RUNNER_FAILURE

ROLES = ("fetch", "program", "ship")


class StopSignal:
    """The first SIGTERM/SIGINT a helper was sent: it then finishes its part, stopped."""

    def __init__(self, also: Callable[[int], None] | None = None) -> None:
        self.signal: int | None = None
        self._also = also
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self.signal is None:
            self.signal = signum
        if self._also is not None:
            self._also(signum)


def run_role(role: str, argv: Sequence[str], environ: Mapping[str, str]) -> int:
    """Run one container's part; its exit code."""
    from learner_image.pod import fetch, program, shipper

    roles: dict[str, Callable[[RunnerConfig, Mapping[str, str]], int]] = {
        "fetch": fetch.run,
        "program": program.run,
        "ship": shipper.run,
    }
    try:
        config = parse_config(argv, environ)
        if config.shared_dir is None:
            raise RunnerFailure(f"`dlaas-learner {role}` needs DLAAS_SHARED_DIR")
        return roles[role](config, environ)
    except RunnerFailure as exc:  # nothing to report it to: the container's log says it
        print(f"dlaas-learner {role}: {exc}", file=sys.stderr, flush=True)
        return EXIT_RUNNER_FAILURE
