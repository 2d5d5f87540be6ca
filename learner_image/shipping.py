"""A learner's shipping: what leaves the learner while its command runs and once it ended.

While the command runs (RUNNING): the log behind the program goes to the live stream and
through the metric parsers to the metrics stream and file (`learner_image.live_log`); the
whole lines of both files are uploaded every `LOG_UPLOAD_S` seconds; committed checkpoints
are uploaded as they appear, and saves the SDK could not write are reported; the
reporter's heartbeat (started when the learner said DOWNLOADING) goes on, paused while the
program is frozen.

When it ended (`Shipper.end`, given a `learner_image.launcher.ProgramEnd`): the log is
stored first; a command that finished by itself goes through STORING (its last checkpoint,
RESULT_DIR, log and metrics uploaded); one stopped or killed by a signal did not finish, so
only its last checkpoint and its log are uploaded; then the exit report is left where the
backend asked and the `exit` event published. `fail` and `stopped_before_start` end a
learner whose command never ran.

The single-process runner ships from the process that runs the command; on Kubernetes the
learner pod's `shipper` container does, following the log the program's container writes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from learner_image.background import Periodic
from learner_image.launcher import ProgramEnd, stopped_before_start
from learner_image.learner_log import FollowedLog
from learner_image.runner_config import RunnerConfig, RunnerFailure
from learner_image.sdk.timer import UPLOAD_POLL_S
from storage import exit_reports
from storage.exit_reports import ExitReport
from storage.job_states import LearnerState

if TYPE_CHECKING:
    from learner_image.checkpoint_sync import CheckpointUploader
    from learner_image.reporter import Reporter
    from storage.object_store import ObjectStore

EXIT_RUNNER_FAILURE = 3
LOG_UPLOAD_S = 10.0


def pretend_gpus_note(gpus: int) -> str:
    noun = "GPU" if gpus == 1 else "GPUs"
    return (
        f"the {gpus} {noun} per learner are pretend and the job runs on CPU: this node's GPUs "
        "are configured with DLAAS_LOCAL_GPUS"
    )


class Shipper:
    def __init__(
        self,
        config: RunnerConfig,
        reporter: Reporter,
        store: ObjectStore | None,
        environ: Mapping[str, str],
        log: FollowedLog | Path,
        frozen: Callable[[], bool],
    ) -> None:
        from learner_image.live_log import LearnerOutput
        from learner_image.metric_lines import parse_metric_line
        from learner_image.metrics_parser import MetricsParser, compile_patterns

        self.config = config
        self.reporter = reporter
        self.store = store
        self.environ = environ
        c = config
        patterns = compile_patterns(c.metric_patterns)
        parser = MetricsParser(patterns, parse_metric_line)
        self.output = LearnerOutput(
            reporter, log, c.metrics_path, c.learner, c.attempt, parser.parse
        )
        for problem in patterns.problems:
            self.output.line(f"[dlaas] {problem}")
        self.uploader: CheckpointUploader | None = None
        self._polls: list[Periodic] = []
        reporter.keep_beating(frozen)

    def close(self) -> None:
        self.reporter.stop_beating()

    # while the command runs ----------------------------------------------------------------

    def running(self, restored: str | None) -> None:
        """The command runs: say so, and ship its checkpoints and log as they come."""
        from learner_image.checkpoint_sync import CheckpointUploader, stored_name

        c, reporter, output, store = self.config, self.reporter, self.output, self.store
        assert store is not None
        self._notify("RUNNING", reporter.status, LearnerState.RUNNING)
        if c.pretend_gpus and c.learner == 1:  # one learner tells the job
            output.line(f"[dlaas] {pretend_gpus_note(c.pretend_gpus)}")
        if restored is not None:
            named = stored_name(restored, c.checkpoint_learner)
            output.line(f"[dlaas] learner {c.learner} resumes from checkpoint {named}")
            self._notify("the restore", reporter.restored, named)
        if c.uploads_checkpoints:
            self.uploader = CheckpointUploader(
                store,
                c.job_id,
                c.checkpoint_dir,
                c.checkpoint_keep,
                on_uploaded=lambda name: self._notify(
                    name, reporter.checkpoint, stored_name(name, c.checkpoint_learner)
                ),
                on_error=lambda text: output.line(f"[dlaas] {text}"),
                already_uploaded=restored,
                learner=c.checkpoint_learner,
                on_failed=self._checkpoint_failed,
            )
            self._polls.append(
                Periodic("dlaas-checkpoints", UPLOAD_POLL_S, self.uploader.sync_once)
            )
        self._polls.append(Periodic("dlaas-log-upload", LOG_UPLOAD_S, self._upload_log))

    def _checkpoint_failed(self, step: int, error: str) -> None:
        from learner_image.checkpoint_sync import stored_name
        from learner_image.sdk.checkpoints import checkpoint_name

        name = stored_name(checkpoint_name(step), self.config.checkpoint_learner)
        self.output.line(f"[dlaas] checkpoint {name} could not be written: {error}")
        self._notify("the failed checkpoint", self.reporter.checkpoint_failed, name, step, error)

    # once it ended -------------------------------------------------------------------------

    def end(self, end: ProgramEnd) -> int:
        """Store what the command left and report how it ended; the learner's exit code."""
        for poll in self._polls:
            poll.stop()
        if end.failure:
            return self.fail(end.failure)
        if end.returncode is None:
            assert end.stop_signal is not None
            return self.stopped_before_start(end.stop_signal)
        report = end.report()
        # A command stopped or killed by a signal did not finish: it has no results to store,
        # and its exit is reported (and its learner restarted) without that delay.
        finished = end.stop_signal is None and not report.signal
        if report.exit_code != 0:
            self.output.line(f"[dlaas] {report.reason}")
        # The command's whole output is stored before anything that may wait on Redis.
        self._try("store the log", self._upload_log)
        if finished:
            self._notify("STORING", self.reporter.status, LearnerState.STORING)
        if self.uploader is not None:
            self.uploader.sync_once()
        if finished:
            try:
                self._upload_results()
            except RunnerFailure as exc:
                return self.fail(str(exc))
        self._finish_logs()
        exit_reports.leave(report, self.environ)
        self._notify("the exit", self.reporter.exit, report)
        return report.exit_code

    def stopped_before_start(self, stop_signal: int) -> int:
        report = stopped_before_start(stop_signal)
        self.output.line(f"[dlaas] {report.reason}")
        self._finish_logs()
        exit_reports.leave(report, self.environ)
        self._notify("the exit", self.reporter.exit, report)
        return report.exit_code

    def fail(self, reason: str) -> int:
        """Report a failure of the runner itself: log line, exit event, exit code 3."""
        print(f"dlaas-learner: {reason}", file=sys.stderr, flush=True)
        self.output.line(f"[dlaas] {reason}")
        self._finish_logs()
        ending = ExitReport(EXIT_RUNNER_FAILURE, None, reason, stopped=False, source="runner")
        exit_reports.leave(ending, self.environ)
        try:
            self.reporter.exit(ending)
        except Exception as exc:
            print(f"dlaas-learner: could not report the exit: {exc}", file=sys.stderr)
        return EXIT_RUNNER_FAILURE

    # helpers -------------------------------------------------------------------------------

    def _notify(self, what: str, publish: Callable[..., None], *args: object) -> None:
        """Publish an event; while the command runs, a lost event is no reason to stop it."""
        try:
            publish(*args)
        except Exception as exc:
            text = f"could not report {what} to the control plane: {exc}"
            print(f"dlaas-learner: {text}", file=sys.stderr, flush=True)
            self.output.line(f"[dlaas] {text}")

    def _upload_results(self) -> None:
        from learner_image.results_upload import result_files, results_prefix, upload_results

        c = self.config
        assert self.store is not None
        try:
            prefix = results_prefix(c.job_id, c.learner, result_files(c.result_dir))
            upload_results(self.store, c.result_dir, prefix)
        except Exception as exc:
            raise RunnerFailure(f"could not upload the results: {exc}") from exc

    def _upload_log(self) -> None:
        """Upload the whole lines of the log and of the metrics file written so far."""
        c = self.config
        if self.store is None:
            return
        log_bytes, metrics_bytes = self.output.stored_extent()
        with self.output.log.open_reader() as log:
            put_prefix(self.store, c.log_key, log, log_bytes)
        if metrics_bytes > 0:
            with open(c.metrics_path, "rb") as metrics:
                put_prefix(self.store, c.metrics_key, metrics, metrics_bytes)

    def _finish_logs(self) -> None:
        """Drain the live stream and upload the durable files (best effort)."""
        self.output.close()
        self._try("upload the log", self._upload_log)

    @staticmethod
    def _try(what: str, action: Callable[[], None]) -> None:
        try:
            action()
        except Exception as exc:
            print(f"dlaas-learner: could not {what}: {exc}", file=sys.stderr, flush=True)


def put_prefix(store: ObjectStore, key: str, f: BinaryIO, size: int) -> None:
    """Store the first `size` bytes of a file that is still being appended to."""
    from storage.object_store.atomic import read_full

    class Prefix:
        def __init__(self) -> None:
            self.left = size

        def read(self, n: int = -1) -> bytes:
            want = self.left if n < 0 else min(n, self.left)
            data = read_full(f, want) if want else b""
            self.left -= len(data)
            return data

    store.put_stream(key, Prefix())  # type: ignore[arg-type]
