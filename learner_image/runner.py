"""`dlaas-learner`: the process a cluster backend starts for each learner.

Command line (every flag falls back to the environment the backend sets anyway):

    dlaas-learner [--job JOB_ID] [--learner N] [--attempt A] [-- COMMAND...]

- `--job` (env `TRAINING_ID`), `--learner` (env `LEARNER_ID`, 1-based, default 1),
  `--attempt` (env `DLAAS_ATTEMPT`, default 0).
- The user's command: the words after `--`; a single word is a shell script run as is
  (`-- "python train.py --lr 0.1"`), several words are quoted and joined. Without `--`, env
  `DLAAS_COMMAND`. It runs as `/bin/sh -c COMMAND` in MODEL_DIR, in a process group of its
  own (so stops reach everything it started) within the runner's session (so whoever ends
  the runner's session, as the node agent does when a learner ends, ends the command too),
  and the kernel SIGKILLs the shell if the runner dies first (Linux). Processes it leaves
  behind after it exits are killed.

Environment read: `DLAAS_JOB_OBJECTS_URL` and `DLAAS_JOB_TOKEN`, the API's object gateway
and the token minted for the job, through which every object of the job moves (the
lifecycle manager sets them; a runner started by hand without them uses the store the
`DLAAS_*` settings of `storage.settings.Settings` describe); `DLAAS_REDIS_URL`;
`MODEL_DIR`, `DATA_DIR`, `RESULT_DIR`, `LOG_DIR`, `CHECKPOINT_DIR` (default `model`, `data`,
`results`, `logs`, `checkpoints` under the working directory), `NUM_LEARNERS` (default 1),
`DLAAS_DATA_PREFIX` (object-store prefix of the training data, e.g. `data/{user}/{container}/`;
unset or empty = no data), `DLAAS_METRIC_PATTERNS` (JSON list of regexes with named groups),
`DLAAS_CHECKPOINT_KEEP` (default 2), `DLAAS_UPLOAD_ALL_CHECKPOINTS` (`1` = every learner
uploads checkpoints, not only learner 1), `DLAAS_RESTART_SCOPE` (`learner` = this learner
restores and uploads checkpoints of its own, `jobs/{job}/checkpoints/learner-{n}/`, as it is
restarted on its own; default `gang`: one series for all), `DLAAS_STOP_GRACE_S` (default
10). The command gets the runner's environment, with the directory variables made absolute,
`PYTHONUNBUFFERED=1` unless set, and without `DLAAS_JOB_TOKEN`, `DLAAS_S3_ACCESS_KEY`,
`DLAAS_S3_SECRET_KEY`, `DLAAS_DATABASE_URL`; over it the user's environment (the manifest's
`environment`, which reaches the runner only as data in `DLAAS_PROGRAM_ENV`, a JSON object),
which replaces neither the directories nor what dlaas tells every learner
(`runner_config.child_env`). The platform starts the runner as `python -I -m
learner_image.runner` by an absolute interpreter (`runner_config.runner_command`).

What it does: status DOWNLOADING -> model archive, data, the newest committed checkpoint and
the stored log of earlier attempts (which this attempt's log continues) fetched in parallel ->
status RUNNING -> the command runs; its merged stdout/stderr goes at pipe speed to
`LOG_DIR/learner-{n}.log` (`learner_image.learner_log`), and from there, behind the program,
to the job's live log stream and through the metric parsers to the metrics stream and
`LOG_DIR/learner-{n}.metrics.jsonl` (`learner_image.live_log`); the whole lines of both files
are uploaded to `jobs/{job}/logs/learner-{n}.log` and `jobs/{job}/metrics/learner-{n}.jsonl`
every 10 s and at the end; committed checkpoints are uploaded as they appear;
a heartbeat every 2 s (none while a process of the command is stopped: a frozen learner
is a hung one) -> status STORING -> last checkpoint, RESULT_DIR (learner 1 to
`jobs/{job}/results/`, learner n > 1 to `jobs/{job}/results/learner-{n}/`), log and metrics
uploaded -> an `exit` event -> exit. A command killed by a signal (or stopped) did not
finish: no STORING and no results, only its last checkpoint and its log are uploaded.

Learner events (stream `dlaas:job:{job}:events`, relayed into `dlaas:learner-events`; fields
besides job/learner/attempt/kind): `status` with `state` DOWNLOADING | RUNNING | STORING;
`checkpoint` with `name` (its path under `jobs/{job}/checkpoints/`: `ckpt-...`, or
`learner-{n}/ckpt-...` for a series of its own);
`exit` with `exit_code` (the runner's own exit code, below), `signal` (e.g. `SIGKILL`, or
empty), `reason` (text for the user), `source` (`command` when the user's command ended
or was stopped, `runner` when the runner itself failed) and `stopped` (`1` when the runner
was told to stop, so the command did not end by itself).

The phases are modules of their own, which the Kubernetes learner pod runs in three
containers instead of one process (`learner_image.pod`): `learner_image.fetch_phase`
(DOWNLOADING), `learner_image.launcher` (the command) and `learner_image.shipping` (RUNNING,
STORING and the exit). `dlaas-learner fetch|program|ship ...` runs one of them
(`learner_image.pod`); without such a word, `dlaas-learner` runs them all, as here.

Exit codes: the command's own code; 128+N when it was killed by signal N (137 = SIGKILL,
often out of memory); 3 when the runner failed before or around the command (archive not
fetched or unsafe, object store or Redis unreachable); the reason is also the last line
of the job's log. SIGTERM/SIGINT to the runner are forwarded to the command's process group,
followed by SIGKILL after `DLAAS_STOP_GRACE_S`; committed checkpoints and the log are still
uploaded (not the results); the exit event says `stopped by SIGTERM` and the exit code is
128+N of the signal that ended the command (the stop signal when it exited by itself), so a
stopped learner is never mistaken for a finished one.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from learner_image.background import Background
from learner_image.connections import open_store, settings_of
from learner_image.launcher import Launcher
from learner_image.learner_log import LearnerLog
from learner_image.pod import ROLES, run_role
from learner_image.runner_config import RunnerConfig, RunnerFailure, parse_config
from learner_image.shipping import EXIT_RUNNER_FAILURE

if TYPE_CHECKING:
    from learner_image.reporter import Reporter
    from learner_image.shipping import Shipper
    from storage.object_store import ObjectStore
    from storage.settings import Settings


class Runner:
    """The phases of a learner in one process: fetch, then launch and ship."""

    def __init__(self, config: RunnerConfig, environ: Mapping[str, str]) -> None:
        self.config = config
        self.environ = environ
        self.launcher = Launcher(config, environ)
        self.shipper: Shipper | None = None
        self.log: LearnerLog | None = None
        self._connecting: Background[Reporter] | None = None

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.launcher.stop(signum)

    @property
    def stopping(self) -> bool:
        return self.launcher.stop_signal is not None

    def run(self) -> int:
        from learner_image.fetch_phase import fetch_all

        config = self.config
        if config.program_uid is not None:
            # Nothing the runner writes is for other uids: the program's files are handed
            # over to it, and the runner's own are root's alone.
            os.umask(0o077)
        config.log_dir.mkdir(parents=True, exist_ok=True)
        settings = settings_of()
        # Redis is imported, connected and told DOWNLOADING in a background thread, started
        # once the command runs or when the fetch turns out to take a while: importing the
        # client is a large part of start-up, and the command does not need it to start.
        store: ObjectStore | None = None
        try:
            try:
                store = open_store(settings, self.environ)
                restored = fetch_all(
                    config,
                    store,
                    settings,
                    lambda: self.stopping,
                    lambda: self._start_connecting(settings),
                )
            except RunnerFailure as exc:
                return self._ship(settings, store).fail(str(exc))
            shipper = self._ship(settings, store)
            if self.launcher.stop_signal is not None:
                return shipper.stopped_before_start(self.launcher.stop_signal)
            try:
                self.launcher.start()
            except OSError as exc:
                return shipper.fail(f"could not start the command: {exc}")
            shipper.running(restored)
            assert self.log is not None
            return shipper.end(self.launcher.wait(self.log))
        except RunnerFailure as exc:
            if self.shipper is None:  # nothing to report to: the caller prints it
                self.launcher.kill()
                raise
            self.launcher.kill()
            return self.shipper.fail(str(exc))
        except Exception as exc:
            self.launcher.kill()
            if self.shipper is None:
                raise RunnerFailure(f"the learner runner failed: {exc!r}") from exc
            return self.shipper.fail(f"the learner runner failed: {type(exc).__name__}: {exc}")
        finally:
            if self.shipper is not None:
                self.shipper.close()

    def _start_connecting(self, settings: Settings) -> None:
        from learner_image.connections import connect_reporter

        if self._connecting is None:
            self._connecting = Background(
                "dlaas-connect",
                lambda: connect_reporter(settings.redis_url, self.config, downloading=True),
            )

    def _ship(self, settings: Settings, store: ObjectStore | None) -> Shipper:
        """Wait for the Redis connection; then start shipping the learner's output."""
        from learner_image.shipping import Shipper

        self._start_connecting(settings)
        assert self._connecting is not None
        reporter = self._connecting.result()
        self.log = LearnerLog(self.config.log_path)
        self.shipper = Shipper(
            self.config, reporter, store, self.environ, self.log, self.launcher.frozen
        )
        return self.shipper


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ROLES:
        sys.exit(run_role(args[0], args[1:], os.environ))
    environ = os.environ
    try:
        config = parse_config(args, environ)
    except RunnerFailure as exc:
        print(f"dlaas-learner: {exc}", file=sys.stderr)
        sys.exit(EXIT_RUNNER_FAILURE)
    runner = Runner(config, environ)
    runner.install_signal_handlers()
    try:
        code = runner.run()
    except RunnerFailure as exc:  # Redis unreachable: nothing to report the failure to
        print(f"dlaas-learner: {exc}", file=sys.stderr, flush=True)
        code = EXIT_RUNNER_FAILURE
    sys.exit(code)


if __name__ == "__main__":
    main()
