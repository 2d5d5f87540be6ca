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
`DLAAS_S3_SECRET_KEY`, `DLAAS_DATABASE_URL`.

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

import contextlib
import dataclasses
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from learner_image import program_identity
from learner_image.background import Background, Periodic
from learner_image.exit_report import describe_exit, signal_name
from learner_image.runner_config import RunnerConfig, RunnerFailure, child_env, parse_config
from learner_image.sdk.timer import UPLOAD_POLL_S
from storage import exit_reports
from storage.exit_reports import ExitReport

if TYPE_CHECKING:
    import subprocess

    from learner_image.live_log import LearnerOutput
    from learner_image.reporter import Reporter
    from storage.object_store import ObjectStore
    from storage.settings import Settings

EXIT_RUNNER_FAILURE = 3
HEARTBEAT_S = 2.0
LOG_UPLOAD_S = 10.0
FETCH_POLL_S = 0.05


class Runner:
    def __init__(self, config: RunnerConfig, environ: Mapping[str, str]) -> None:
        self.config = config
        self.environ = environ
        self.stop_signal: int | None = None
        self.killed_after_grace = False
        self.child: subprocess.Popen[bytes] | None = None
        self._kill_timer: threading.Timer | None = None
        self.reporter: Reporter | None = None
        self.shipper: LearnerOutput | None = None
        self.store: ObjectStore | None = None
        self.heartbeat: Periodic | None = None
        self._connecting: Background[Reporter] | None = None

    # signals -------------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        first = self.stop_signal is None
        if first:
            self.stop_signal = signum
        self._forward(escalate=not first)

    def _forward(self, escalate: bool = False) -> None:
        """Send the stop signal to the command's group; SIGKILL after the grace period."""
        child = self.child
        if child is None or child.returncode is not None or self.stop_signal is None:
            return
        if escalate:  # a second stop signal: no more grace
            _signal_group(child.pid, signal.SIGKILL)
            return
        _signal_group(child.pid, self.stop_signal)
        if self._kill_timer is None:
            self._kill_timer = threading.Timer(self.config.stop_grace_s, self._grace_over)
            self._kill_timer.daemon = True
            self._kill_timer.start()

    def _grace_over(self) -> None:
        child = self.child
        if child is not None and child.poll() is None:
            self.killed_after_grace = True
            _signal_group(child.pid, signal.SIGKILL)

    # the run -------------------------------------------------------------------------------

    def run(self) -> int:
        from storage.settings import Settings

        config = self.config
        config.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            settings = Settings()
        except ValueError as exc:
            raise RunnerFailure(f"bad DLAAS_* settings: {exc}") from exc
        # Redis is imported, connected and told DOWNLOADING in a background thread, started
        # once the command runs or when the fetch turns out to take a while: importing the
        # client is a large part of start-up, and the command does not need it to start.
        try:
            try:
                self.store = _open_store(settings, self.environ)
                restored = self._prepare(settings)
            except RunnerFailure as exc:
                self._join_reporter(settings)
                return self._fail(str(exc))
            if self.stop_signal is not None:
                self._join_reporter(settings)
                return self._stopped_before_start()
            try:
                self._start_child()
            except OSError as exc:
                self._join_reporter(settings)
                return self._fail(f"could not start the command: {exc}")
            self._join_reporter(settings)
            return self._supervise(restored)
        except RunnerFailure as exc:
            if self.reporter is None:  # nothing to report to: the caller prints it
                self._kill_child()
                raise
            return self._fail(str(exc))
        except Exception as exc:
            if self.reporter is None:
                self._kill_child()
                raise RunnerFailure(f"the learner runner failed: {exc!r}") from exc
            return self._fail(f"the learner runner failed: {type(exc).__name__}: {exc}")
        finally:
            if self.heartbeat is not None:
                self.heartbeat.stop(timeout=1.0)

    def _connect(self, settings: Settings) -> Reporter:
        from learner_image.reporter import connect

        c = self.config
        try:
            reporter = connect(settings.redis_url, c.job_id, c.learner, c.attempt)
            reporter.status("DOWNLOADING")
        except Exception as exc:
            raise RunnerFailure(f"could not reach Redis at {settings.redis_url}: {exc}") from exc
        return reporter

    def _start_connecting(self, settings: Settings) -> None:
        if self._connecting is None:
            self._connecting = Background("dlaas-connect", lambda: self._connect(settings))

    def _join_reporter(self, settings: Settings) -> None:
        """Wait for the Redis connection; then start the log shipper and the heartbeat."""
        self._start_connecting(settings)
        assert self._connecting is not None
        self.reporter = self._connecting.result()
        self._start_shipper()
        self.heartbeat = Periodic("dlaas-heartbeat", HEARTBEAT_S, self._beat, at_start=True)

    def _beat(self) -> None:
        """A heartbeat, unless the command is stopped (SIGSTOP, a debugger): a learner whose
        program is frozen is hung, and its silence says so."""
        child = self.child
        if child is not None and child.returncode is None and group_stopped(child.pid):
            return
        assert self.reporter is not None
        self.reporter.heartbeat()

    def _start_shipper(self) -> None:
        from learner_image.live_log import LearnerOutput
        from learner_image.metric_lines import parse_metric_line
        from learner_image.metrics_parser import MetricsParser, compile_patterns

        assert self.reporter is not None
        c = self.config
        patterns = compile_patterns(c.metric_patterns)
        parser = MetricsParser(patterns, parse_metric_line)
        self.shipper = LearnerOutput(
            self.reporter, c.log_path, c.metrics_path, c.learner, c.attempt, parser.parse
        )
        for problem in patterns.problems:
            self.shipper.line(f"[dlaas] {problem}")

    def _prepare(self, settings: Settings) -> str | None:
        """Fetch the archive, the data and the newest checkpoint in parallel; the name of
        the restored checkpoint, if any."""
        from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait

        from learner_image.checkpoint_sync import restore_newest
        from learner_image.data_fetch import FetchError, fetch_data, fetch_model

        c = self.config
        store = self.store
        assert store is not None
        for d in (c.data_dir, c.result_dir, c.checkpoint_dir):
            d.mkdir(parents=True, exist_ok=True)

        def earlier_logs() -> None:
            try:
                fetch_earlier_logs(store, c)
            except Exception as exc:  # the stored log then starts with this attempt
                print(f"dlaas-learner: no earlier log: {exc}", file=sys.stderr, flush=True)

        def restore() -> str | None:
            try:
                return restore_newest(store, c.job_id, c.checkpoint_dir, c.checkpoint_learner)
            except Exception as exc:
                raise FetchError(f"could not restore the last checkpoint: {exc}") from exc

        pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="dlaas-fetch")
        try:
            model = pool.submit(fetch_model, store, settings, c.job_id, c.model_dir)
            data = pool.submit(fetch_data, store, c.data_prefix, c.data_dir)
            ckpt = pool.submit(restore)
            logs = pool.submit(earlier_logs)
            pending: set[Future[Any]] = {model, data, ckpt, logs}
            while pending and self.stop_signal is None:
                _, pending = wait(pending, timeout=FETCH_POLL_S, return_when=FIRST_EXCEPTION)
                if pending:  # a long fetch: report DOWNLOADING meanwhile
                    self._start_connecting(settings)
                for fut in (model, data, ckpt, logs):
                    if fut.done() and fut.exception() is not None:
                        exc = fut.exception()
                        raise RunnerFailure(str(exc)) from exc
            if self.stop_signal is not None:
                return None
            return ckpt.result()
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def _start_child(self) -> None:
        import subprocess

        c = self.config
        as_program: dict[str, Any] = {}
        if c.program_uid is not None:
            program_identity.hand_over(c.program_dirs, c.program_uid)
            as_program = {
                "user": c.program_uid,
                "group": c.program_uid,
                "extra_groups": [],
                "umask": 0o077,
            }
        self.child = subprocess.Popen(
            ["/bin/sh", "-c", c.command],
            cwd=c.model_dir,
            env=child_env(c, self.environ),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            bufsize=0,
            stderr=subprocess.STDOUT,
            process_group=0,
            preexec_fn=die_with_parent(),
            **as_program,
        )
        if self.stop_signal is not None:
            self._forward()

    def _kill_child(self) -> None:
        child = self.child
        if child is not None and child.poll() is None:
            _signal_group(child.pid, signal.SIGKILL)
            child.wait()

    def _supervise(self, restored: str | None) -> int:
        """Tee the running command's output and sync its checkpoints until it ends, then
        store what it left and report how it ended."""
        from learner_image.checkpoint_sync import CheckpointUploader, stored_name

        c = self.config
        shipper, reporter, store, child = self.shipper, self.reporter, self.store, self.child
        assert shipper is not None and reporter is not None
        assert store is not None and child is not None
        self._notify("RUNNING", reporter.status, "RUNNING")

        if restored is not None:
            named = stored_name(restored, c.checkpoint_learner)
            shipper.line(f"[dlaas] learner {c.learner} resumes from checkpoint {named}")
            self._notify("the restore", reporter.restored, named)

        uploader: CheckpointUploader | None = None
        if c.uploads_checkpoints:
            uploader = CheckpointUploader(
                store,
                c.job_id,
                c.checkpoint_dir,
                c.checkpoint_keep,
                on_uploaded=lambda name: self._notify(
                    name, reporter.checkpoint, stored_name(name, c.checkpoint_learner)
                ),
                on_error=lambda text: shipper.line(f"[dlaas] {text}"),
                already_uploaded=restored,
                learner=c.checkpoint_learner,
                on_failed=self._checkpoint_failed,
            )

        last_line = [""]

        def pump() -> None:
            assert child.stdout is not None
            last_line[0] = shipper.capture(child.stdout.fileno())

        reader = threading.Thread(target=pump, name="dlaas-output", daemon=True)
        reader.start()
        ckpt_poll = (
            Periodic("dlaas-checkpoints", UPLOAD_POLL_S, uploader.sync_once)
            if uploader is not None
            else None
        )
        log_upload = Periodic("dlaas-log-upload", LOG_UPLOAD_S, self._upload_log)

        returncode = child.wait()
        if self._kill_timer is not None:
            self._kill_timer.cancel()
        if self.config.program_uid is not None:
            # Nothing of the program outlives it: no process of its uid may change its
            # files while they are stored (a file swapped for a link to one of root's).
            program_identity.end_processes(self.config.program_uid)
        reader.join(1.0)
        if reader.is_alive():  # something the command started still holds the pipe
            _signal_group(child.pid, signal.SIGKILL)
            reader.join(5.0)
        log_upload.stop()
        if ckpt_poll is not None:
            ckpt_poll.stop()

        report = describe_exit(returncode, self.stop_signal, self.killed_after_grace)
        # A command stopped or killed by a signal did not finish: it has no results to store,
        # and its exit is reported (and its learner restarted) without that delay.
        finished = self.stop_signal is None and not report.signal
        if report.exit_code != 0:
            shipper.line(f"[dlaas] {report.reason}")
        # The command's whole output is stored before anything that may wait on Redis.
        self._try("store the log", self._upload_log)
        if finished:
            self._notify("STORING", reporter.status, "STORING")
        if uploader is not None:
            uploader.sync_once()
        if finished:
            self._upload_results()
        self._finish_logs()
        ending = dataclasses.replace(report, last_line=last_line[0])
        exit_reports.leave(ending, self.environ)
        self._notify("the exit", reporter.exit, ending)
        return report.exit_code

    def _checkpoint_failed(self, step: int, error: str) -> None:
        from learner_image.checkpoint_sync import stored_name
        from learner_image.sdk.checkpoints import checkpoint_name

        assert self.shipper is not None and self.reporter is not None
        name = stored_name(checkpoint_name(step), self.config.checkpoint_learner)
        self.shipper.line(f"[dlaas] checkpoint {name} could not be written: {error}")
        self._notify("the failed checkpoint", self.reporter.checkpoint_failed, name, step, error)

    def _notify(self, what: str, publish: Callable[..., None], *args: object) -> None:
        """Publish an event; while the command runs, a lost event is no reason to stop it."""
        try:
            publish(*args)
        except Exception as exc:
            text = f"could not report {what} to the control plane: {exc}"
            print(f"dlaas-learner: {text}", file=sys.stderr, flush=True)
            if self.shipper is not None:
                self.shipper.line(f"[dlaas] {text}")

    def _upload_results(self) -> None:
        from learner_image.results_upload import results_prefix, upload_results

        c = self.config
        assert self.store is not None
        try:
            upload_results(self.store, c.result_dir, results_prefix(c.job_id, c.learner))
        except Exception as exc:
            raise RunnerFailure(f"could not upload the results: {exc}") from exc

    def _upload_log(self) -> None:
        """Upload the whole lines of the log and of the metrics file written so far."""
        c = self.config
        if self.shipper is None or self.store is None:
            return
        log_bytes, metrics_bytes = self.shipper.stored_extent()
        put_prefix(self.store, c.log_key, c.log_path, log_bytes)
        if metrics_bytes > 0:
            put_prefix(self.store, c.metrics_key, c.metrics_path, metrics_bytes)

    def _finish_logs(self) -> None:
        """Drain the live stream and upload the durable files (best effort)."""
        if self.shipper is not None:
            self.shipper.close()
        self._try("upload the log", self._upload_log)

    @staticmethod
    def _try(what: str, action: Callable[[], None]) -> None:
        try:
            action()
        except Exception as exc:
            print(f"dlaas-learner: could not {what}: {exc}", file=sys.stderr, flush=True)

    def _stopped_before_start(self) -> int:
        assert self.stop_signal is not None and self.reporter is not None
        name = signal_name(self.stop_signal)
        reason = f"stopped by {name} before the command started"
        if self.shipper is not None:
            self.shipper.line(f"[dlaas] {reason}")
        self._finish_logs()
        code = 128 + self.stop_signal
        ending = ExitReport(code, name, reason, stopped=True)
        exit_reports.leave(ending, self.environ)
        self.reporter.exit(ending)
        return code

    def _fail(self, reason: str) -> int:
        """Report a failure of the runner itself: log line, exit event, exit code 3."""
        print(f"dlaas-learner: {reason}", file=sys.stderr, flush=True)
        self._kill_child()
        if self.shipper is not None:
            self.shipper.line(f"[dlaas] {reason}")
        self._finish_logs()
        ending = ExitReport(EXIT_RUNNER_FAILURE, None, reason, stopped=False, source="runner")
        exit_reports.leave(ending, self.environ)
        if self.reporter is not None:
            try:
                self.reporter.exit(ending)
            except Exception as exc:
                print(f"dlaas-learner: could not report the exit: {exc}", file=sys.stderr)
        return EXIT_RUNNER_FAILURE


def die_with_parent() -> Callable[[], None] | None:
    """A pre-exec hook that has the kernel SIGKILL the command if the runner dies first (Linux
    PR_SET_PDEATHSIG), so a runner killed outright leaves no training process behind. It only
    calls a function resolved beforehand: nothing that could wait for a lock held by another
    thread at fork time."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    pr_set_pdeathsig = 1

    def hook() -> None:
        prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the runner died before the hook ran
            os._exit(1)

    return hook


def fetch_earlier_logs(store: ObjectStore, config: RunnerConfig) -> None:
    """Continue the stored log and metrics of earlier attempts of this learner: download them
    into LOG_DIR unless the local files exist already (a reused working directory)."""
    from storage.object_store import ObjectNotFound

    for key, path in (
        (config.log_key, config.log_path),
        (config.metrics_key, config.metrics_path),
    ):
        if path.exists():
            continue
        with contextlib.suppress(ObjectNotFound):
            store.get_file(key, path)


def put_prefix(store: ObjectStore, key: str, path: Path, size: int) -> None:
    """Store the first `size` bytes of a file that is still being appended to."""
    from storage.object_store.atomic import read_full

    class Prefix:
        def __init__(self, f: BinaryIO) -> None:
            self.f = f
            self.left = size

        def read(self, n: int = -1) -> bytes:
            want = self.left if n < 0 else min(n, self.left)
            data = read_full(self.f, want) if want else b""
            self.left -= len(data)
            return data

    with open(path, "rb") as f:
        store.put_stream(key, Prefix(f))  # type: ignore[arg-type]


def group_stopped(pgid: int) -> bool:
    """Whether a process of group `pgid` is stopped (state T or t in /proc; Linux)."""
    try:
        entries = list(os.scandir("/proc"))
    except OSError:
        return False
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            with open(os.path.join(entry.path, "stat")) as stat_file:
                stat = stat_file.read()
        except OSError:
            continue
        # The command name (field 2) may hold spaces and parentheses: split after the last ")".
        state, _ppid, group = stat[stat.rindex(")") + 2 :].split(maxsplit=3)[:3]
        if group == str(pgid) and state in ("T", "t"):
            return True
    return False


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _open_store(settings: Settings, environ: Mapping[str, str]) -> ObjectStore:
    from storage.object_store import open_learner_object_store

    try:
        return open_learner_object_store(settings, environ)
    except Exception as exc:
        raise RunnerFailure(f"could not open the object store: {exc}") from exc


def main(argv: Sequence[str] | None = None) -> None:
    environ = os.environ
    try:
        config = parse_config(sys.argv[1:] if argv is None else argv, environ)
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
