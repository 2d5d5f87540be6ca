"""The node agent's learner table: start, reap, stop and remember learner processes.

Each learner is the runner started in a session of its own, in its own working directory;
whatever it starts stays in that session, so a learner that ends takes all of it along.
A thread per learner waits for it and reports its exit at once through `on_exit`. The
table is kept on disk, so an agent started again re-adopts the processes that are still
alive (the same pid with the same start time) and marks the others ended as their runner's
exit report says (`storage.exit_reports`), or failed when they left none.

```
 PUT --> Running --(exit 0)--> Succeeded
            |    --(exit != 0, signal)--> Failed        DELETE: SIGTERM the group,
            |                                            SIGKILL after the grace, then
            +--(gone while the agent was down)--> Failed forget the learner
```
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from learner_image import job_network, program_identity
from learner_image.ps import sidecar
from learner_image.rendezvous_port import free_rendezvous_port
from learner_image.runner_config import (
    PRIVATE_MOUNTS,
    PROGRAM_MOUNTS_ENV,
    PROGRAM_NETWORK_ENV,
    PROGRAM_TMPDIR_ENV,
    PROGRAM_UID_ENV,
    RUNNER_COMMAND,
    RUNNER_DIR_ENV,
    program_env_variable,
    runner_command,
)
from lifecycle_manager.backends.base import LearnerPhase, LearnerSpec, Resources
from lifecycle_manager.decisions.job_progress import describe_exit
from storage import exit_reports
from storage.exit_reports import ExitReport
from storage.private_files import open_private_append, write_private_text

log = logging.getLogger(__name__)

# A learner's working directory: the runner's own files (its log, its exit report) and
# `program/`, all the learner's program may touch. When the agent runs as root the program
# runs as a uid of its own that owns `program/` alone (0700), and the directories above it
# are root's and only traversable (0711).
PROGRAM_DIR = "program"
WORK_SUBDIRS = {
    "MODEL_DIR": f"{PROGRAM_DIR}/model",
    "DATA_DIR": f"{PROGRAM_DIR}/data",
    "RESULT_DIR": f"{PROGRAM_DIR}/result",
    "LOG_DIR": f"{PROGRAM_DIR}/logs",
    "CHECKPOINT_DIR": f"{PROGRAM_DIR}/checkpoints",
}
PROGRAM_TMP = f"{PROGRAM_DIR}/tmp"  # the program's TMPDIR (and its /tmp where mounts allow)
RUNNER_DIR = "runner"  # the runner's own files (its complete log), root's alone
RUNNER_LOG = "runner.log"
EXIT_REPORT = "exit-report.json"  # what the runner leaves behind when it ends
PS_LOG = "ps.log"
# Variables of the agent's own environment a learner inherits; everything else it gets
# from its spec, as a pod gets only what its manifest says. The runner, in isolated mode,
# ignores PYTHONPATH; the program gets the agent's as a default (a checkout run with
# PYTHONPATH), which the user's environment may replace.
INHERITED_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "LC_ALL",
    "TZ",
    "TMPDIR",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
)
OPEN_FILES_LIMIT = 65536
# The memory limit is on the data segment of each process (RLIMIT_DATA), not on address
# space (RLIMIT_AS): PyTorch and glibc reserve far more address space than they use. It is
# a guard against a runaway process, with headroom, not an exact cgroup-style limit.
DATA_LIMIT_FACTOR = 2
MIN_DATA_LIMIT = 2 << 30
# Learners yield the CPU to the platform's own processes on the machine (what reserved CPU
# does for a kubelet's node): however busy they keep the cores, the monitor and the workers
# still hear of a learner's end and act on it at once. Idle cores are theirs all the same.
LEARNER_NICENESS = 10

ExitCallback = Callable[["LearnerRecord"], bool]


@dataclass
class LearnerRecord:
    name: str
    job: str
    learner: int
    attempt: int
    num_learners: int
    workdir: str
    master_port: int
    pid: int | None = None
    start_ticks: int | None = None
    phase: str = LearnerPhase.PENDING.value
    exit_code: int | None = None
    signal: str | None = None
    reason: str = ""
    deleting: bool = False
    reported: bool = False  # whether the exit reached the event stream
    # From the runner's exit report: it was told to stop; the program's last line.
    stopped: bool = False
    last_line: str = ""
    created_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    uid: int | None = None  # the program's own uid (and gid), when the agent runs as root

    @property
    def finished(self) -> bool:
        return self.phase in (LearnerPhase.SUCCEEDED.value, LearnerPhase.FAILED.value)

    def public(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("start_ticks")
        return data


def _stat_fields(pid: int | str) -> list[str] | None:
    """Fields of /proc/<pid>/stat from the state on (field 3), or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ")".
    return stat[stat.rindex(")") + 2 :].split()


def process_start_ticks(pid: int) -> int | None:
    """The start time of a live process in clock ticks since boot, or None if it is gone."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] == "Z":
        return None
    return int(fields[19])


def group_is_running(pgid: int) -> bool:
    """Whether any process of the group still runs (zombies waiting to be reaped do not)."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat_fields(entry.name)
            if fields is not None and fields[2] == str(pgid) and fields[0] != "Z":
                return True
    return False


def _session_groups(sid: int) -> set[int]:
    """The process groups of a session that still have a running process."""
    groups = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat_fields(entry.name)
            if fields is not None and fields[3] == str(sid) and fields[0] != "Z":
                groups.add(int(fields[2]))
    return groups


def _kill_session(sid: int, timeout: float = 2.0) -> None:
    """SIGKILL what is left of a learner's session (the runner's process group, and the
    group the runner started its command in) and wait, briefly, until none of it runs."""
    deadline = time.monotonic() + timeout
    while (groups := _session_groups(sid)) and time.monotonic() < deadline:
        for pgid in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        time.sleep(0.01)


class LearnerTable:
    def __init__(
        self,
        root: Path,
        on_exit: ExitCallback,
        *,
        grace: float = 30.0,
        keep_workdirs: bool = False,
        program_uids: range | None = None,
        work_root: Path | None = None,
        private_mounts: bool = False,
    ) -> None:
        """`program_uids`: run each learner's program as a uid of its own from this range
        (the agent must be root); `work_root`: where learners' working directories go
        (default `root`; with program uids it must not be under a directory they cannot
        traverse, such as a 0700 DLAAS_HOME); `private_mounts`: give each such program
        private /tmp, /var/tmp, /dev/shm and /proc (`learner_image.program_sandbox`)."""
        self.root = root
        self.on_exit = on_exit
        self.grace = grace
        self.keep_workdirs = keep_workdirs
        self.program_uids = program_uids
        self.work_root = work_root or root
        self.private_mounts = private_mounts
        self._state_file = root / "agent-learners.json"
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._records: dict[str, LearnerRecord] = {}
        self._ports: dict[str, int] = {}
        self._next_cpu = 0
        root.mkdir(parents=True, exist_ok=True)

    # -- state on disk -----------------------------------------------------------------

    def load(self) -> None:
        """Read the table left by an earlier agent and re-adopt its live learners."""
        if not self._state_file.exists():
            return
        data = json.loads(self._state_file.read_text())
        with self._lock:
            self._ports = {str(k): int(v) for k, v in data.get("ports", {}).items()}
            for raw in data.get("learners", []):
                record = LearnerRecord(**raw)
                self._records[record.name] = record
            for record in list(self._records.values()):
                if record.finished:
                    continue
                alive = record.pid is not None and (
                    process_start_ticks(record.pid) == record.start_ticks
                )
                if alive:
                    log.info("re-adopting %s (pid %s)", record.name, record.pid)
                    self._watch_adopted(record)
                elif (report := self._exit_report(record)) is not None:
                    self._finish(record, report.exit_code, report.signal, report.reason)
                else:
                    self._finish(
                        record, None, None, "vanished while the node agent was down", lost=True
                    )
            self._save()

    def _save(self) -> None:
        data = {
            "learners": [asdict(record) for record in self._records.values()],
            "ports": self._ports,
        }
        temp = self._state_file.with_suffix(".tmp")
        write_private_text(temp, json.dumps(data, indent=1))
        os.replace(temp, self._state_file)

    # -- queries -----------------------------------------------------------------------

    def records(self, job: str | None = None) -> list[LearnerRecord]:
        with self._lock:
            return [r for r in self._records.values() if job is None or r.job == job]

    def get(self, name: str) -> LearnerRecord | None:
        with self._lock:
            return self._records.get(name)

    # -- create --------------------------------------------------------------------------

    def create(self, spec: LearnerSpec) -> tuple[LearnerRecord, bool]:
        """Start a learner unless one of that name exists; returns it and whether it is new."""
        with self._lock:
            existing = self._records.get(spec.name)
            if existing is not None:
                return existing, False
            job_dir = self.work_root / "jobs" / spec.job_id
            workdir = job_dir / f"learner-{spec.learner}" / f"a{spec.attempt}"
            record = LearnerRecord(
                uid=self._free_uid(),
                name=spec.name,
                job=spec.job_id,
                learner=spec.learner,
                attempt=spec.attempt,
                num_learners=spec.num_learners,
                workdir=str(workdir),
                master_port=self._master_port(spec.job_id, spec.attempt),
            )
            self._records[spec.name] = record
            self._start(record, spec)
            self._save()
            return record, True

    def _free_uid(self) -> int | None:
        """The lowest program uid no learner the agent knows of holds."""
        if self.program_uids is None:
            return None
        taken = {r.uid for r in self._records.values()}
        for uid in self.program_uids:
            if uid not in taken:
                return uid
        raise RuntimeError(f"every program uid of {self.program_uids} is in use")

    def _prepare_workdir(self, record: LearnerRecord) -> None:
        workdir = Path(record.workdir)
        for sub in WORK_SUBDIRS.values():
            (workdir / sub).mkdir(parents=True, exist_ok=True)
        if record.uid is None:
            return
        # Root's directories down to the learner's are traversable, not listable: a program
        # reaches its own directory by name and cannot see which others exist.
        for directory in (workdir, *workdir.parents):
            if directory == self.work_root or self.work_root in directory.parents:
                os.chown(directory, 0, 0, follow_symlinks=False)
                directory.chmod(0o711)
        (workdir / RUNNER_DIR).mkdir(mode=0o700, exist_ok=True)
        program = workdir / PROGRAM_DIR
        for path in (program, *(workdir / sub for sub in WORK_SUBDIRS.values())):
            os.chown(path, record.uid, record.uid, follow_symlinks=False)
            path.chmod(0o700)

    def _network_path(self, job: str, attempt: int) -> Path:
        return self.root / "networks" / f"{job}-a{attempt}"

    def _job_network(self, record: LearnerRecord) -> Path | None:
        """The network namespace of the learner's job attempt, made for its first learner;
        None where the node refuses one (its programs then share the node's network)."""
        path = self._network_path(record.job, record.attempt)
        if path.exists() and os.path.ismount(path):
            return path
        path.unlink(missing_ok=True)  # left by an agent that died before it was mounted
        try:
            job_network.make(path)
        except OSError as error:
            log.warning("%s shares the node's network: %s", record.name, error)
            return None
        return path

    def _master_port(self, job: str, attempt: int) -> int:
        key = f"{job}/a{attempt}"
        if key not in self._ports:
            self._ports[key] = free_rendezvous_port()
        return self._ports[key]

    def _start(self, record: LearnerRecord, spec: LearnerSpec) -> None:
        workdir = Path(record.workdir)
        self._prepare_workdir(record)
        env = self._environment(record, spec)
        if record.uid is not None:
            env[PROGRAM_TMPDIR_ENV] = str(workdir / PROGRAM_TMP)
            if self.private_mounts:
                env[PROGRAM_MOUNTS_ENV] = PRIVATE_MOUNTS
                network = self._job_network(record)
                if network is not None:
                    env[PROGRAM_NETWORK_ENV] = str(network)
        if sidecar.wanted(spec.env):
            try:  # before the program starts, which must find it made
                sidecar.make_region(record.job, record.learner, record.attempt, record.uid)
            except OSError as error:
                self._finish(
                    record, 126, None, f"cannot make the parameter server's region: {error}"
                )
                return
        argv = learner_argv(spec.command, env["PATH"])
        if argv is None:
            missing = spec.command[0] if spec.command else "(empty command)"
            self._finish(record, 127, None, f"command not found: {missing}")
            return
        with open_private_append(workdir / RUNNER_LOG) as output:
            try:
                process = subprocess.Popen(
                    argv,
                    cwd=workdir,
                    env={**env, **program_env_variable(spec.program_env)},
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    close_fds=True,
                )
            except OSError as error:
                self._finish(record, 126, None, f"cannot start the learner: {error}")
                return
        record.pid = process.pid
        record.start_ticks = process_start_ticks(process.pid)
        record.phase = LearnerPhase.RUNNING.value
        self._limit(process.pid, spec.resources)
        if sidecar.wanted(spec.env):
            self._start_parameter_server(record, env, process.pid)
        threading.Thread(
            target=self._reap, args=(record, process), name=f"reap-{record.name}", daemon=True
        ).start()

    def _start_parameter_server(
        self, record: LearnerRecord, env: dict[str, str], pgid: int
    ) -> None:
        """The `dlaas-ps` sidecar: `--supervise` restarts it if it dies and ends it when the
        learner's runner `pgid` exits, as a sidecar container ends with its pod."""
        with open_private_append(Path(record.workdir) / PS_LOG) as output:
            try:
                subprocess.Popen(
                    [*sidecar.command(sys.executable), "--supervise"],
                    cwd=record.workdir,
                    env=sidecar.sidecar_env(env, {"DLAAS_PS_EXIT_WITH": str(pgid)}),
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    close_fds=True,
                )
            except OSError as error:
                log.warning("could not start the parameter server of %s: %s", record.name, error)

    def _environment(self, record: LearnerRecord, spec: LearnerSpec) -> dict[str, str]:
        """The runner's environment, the platform's alone: the agent's INHERITED_ENV, the
        spec's `env` and the learner's placement (never the user's `program_env`)."""
        env = {key: os.environ[key] for key in INHERITED_ENV if key in os.environ}
        # The program finds dlaas's scripts and interpreter first.
        interpreter_bin = str(Path(sys.executable).parent)
        env["PATH"] = os.pathsep.join(p for p in (interpreter_bin, env.get("PATH", "")) if p)
        env.update(spec.env)
        for name, sub in WORK_SUBDIRS.items():
            env[name] = str(Path(record.workdir) / sub)
        env["MASTER_ADDR"] = "127.0.0.1"
        env["MASTER_PORT"] = str(record.master_port)
        env[exit_reports.EXIT_REPORT_ENV] = str(Path(record.workdir) / EXIT_REPORT)
        if record.uid is not None:
            env[PROGRAM_UID_ENV] = str(record.uid)
            env[RUNNER_DIR_ENV] = str(Path(record.workdir) / RUNNER_DIR)
            env["HOME"] = str(Path(record.workdir) / PROGRAM_DIR)
        if sidecar.wanted(spec.env):
            peers = self.root / "jobs" / record.job / f"ps-peers-a{record.attempt}"
            env.update(sidecar.local_placement(record.job, record.learner, record.attempt, peers))
        cpus = spec.resources.cpus
        if cpus and "OMP_NUM_THREADS" not in spec.env:
            env["OMP_NUM_THREADS"] = str(max(1, min(math.ceil(cpus), os.cpu_count() or 1)))
        return env

    def _limit(self, pid: int, limits: Resources) -> None:
        """Apply resource limits the OS offers for a single process tree, best effort."""
        try:
            niceness = min(os.getpriority(os.PRIO_PROCESS, 0) + LEARNER_NICENESS, 19)
            os.setpriority(os.PRIO_PROCESS, pid, niceness)
            nice_session(pid, niceness)
            _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            cap = (
                OPEN_FILES_LIMIT if hard == resource.RLIM_INFINITY else min(hard, OPEN_FILES_LIMIT)
            )
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (cap, hard))
            if limits.memory_bytes:
                data = max(limits.memory_bytes * DATA_LIMIT_FACTOR, MIN_DATA_LIMIT)
                resource.prlimit(pid, resource.RLIMIT_DATA, (data, data))
            available = sorted(os.sched_getaffinity(0))
            if limits.cpus and math.ceil(limits.cpus) < len(available):
                count = math.ceil(limits.cpus)
                chosen = {available[(self._next_cpu + i) % len(available)] for i in range(count)}
                self._next_cpu = (self._next_cpu + count) % len(available)
                os.sched_setaffinity(pid, chosen)
        except (OSError, ValueError) as error:
            log.warning("could not limit learner pid %s: %s", pid, error)

    # -- exits ---------------------------------------------------------------------------

    def _reap(self, record: LearnerRecord, process: subprocess.Popen[bytes]) -> None:
        status = process.wait()
        code, signame = (None, signal.Signals(-status).name) if status < 0 else (status, None)
        self._after_exit(record, code, signame)

    def _watch_adopted(self, record: LearnerRecord) -> None:
        """Wait for a process that is not the agent's child (its exit status is not ours)."""

        def watch(pid: int) -> None:
            try:
                pidfd: int | None = os.pidfd_open(pid)
            except OSError:
                pidfd = None
            if pidfd is not None:
                try:
                    if process_start_ticks(pid) == record.start_ticks:
                        select.select([pidfd], [], [])
                finally:
                    os.close(pidfd)
            while process_start_ticks(pid) == record.start_ticks:
                time.sleep(0.1)
            report = self._exit_report(record)
            if report is None:
                self._after_exit(
                    record, None, None, "exit status unknown (the agent re-adopted it)"
                )
            else:
                self._after_exit(record, report.exit_code, report.signal, report.reason)

        assert record.pid is not None
        threading.Thread(
            target=watch, args=(record.pid,), name=f"watch-{record.name}", daemon=True
        ).start()

    def _after_exit(
        self, record: LearnerRecord, code: int | None, signame: str | None, reason: str = ""
    ) -> None:
        if record.pid is not None:
            # Like a container, a learner ends with its main process: everything it started
            # goes too, the training program included (the runner is its session's leader).
            _kill_session(record.pid)
        if record.uid is not None:
            program_identity.end_processes(
                record.uid
            )  # and what the program detached from the session
        with self._lock:
            self._finish(record, code, signame, reason)
            if record.deleting:
                self._forget(record)
            self._save()

    def _finish(
        self,
        record: LearnerRecord,
        code: int | None,
        signame: str | None,
        reason: str = "",
        *,
        lost: bool = False,
    ) -> None:
        report = self._exit_report(record)
        if report is not None:
            record.stopped, record.last_line = report.stopped, report.last_line
        record.exit_code = code
        record.signal = signame
        if reason:
            record.reason = reason
        elif record.deleting:
            record.reason = f"{describe_exit(code, signame)} (deleted)"
        else:
            record.reason = describe_exit(code, signame)
        succeeded = code == 0 and signame is None and not lost
        record.phase = (LearnerPhase.SUCCEEDED if succeeded else LearnerPhase.FAILED).value
        record.finished_at = time.time()
        record.reported = self._report(record)
        self._changed.notify_all()

    def _exit_report(self, record: LearnerRecord) -> ExitReport | None:
        """What the learner's runner said of its end, if it could say it."""
        return exit_reports.read(Path(record.workdir) / EXIT_REPORT)

    def _report(self, record: LearnerRecord) -> bool:
        try:
            return self.on_exit(record)
        except Exception:
            log.exception("could not report the exit of %s", record.name)
            return False

    def report_pending(self) -> None:
        """Report again the exits that could not be reported when they happened."""
        with self._lock:
            pending = [r for r in self._records.values() if r.finished and not r.reported]
            for record in pending:
                record.reported = self._report(record)
            if pending:
                self._save()

    # -- delete --------------------------------------------------------------------------

    def delete(self, names: Iterable[str], *, grace: float | None = None) -> list[str]:
        """Stop learners: SIGTERM now, SIGKILL after the grace; forget them once dead."""
        grace = self.grace if grace is None else grace
        targeted = []
        with self._lock:
            for name in names:
                record = self._records.get(name)
                if record is None:
                    continue
                targeted.append(name)
                if record.deleting:
                    continue
                record.deleting = True
                if record.finished or record.pid is None:
                    self._forget(record)
                    continue
                self._signal(record, signal.SIGTERM)
                timer = threading.Timer(grace, self._signal, args=(record, signal.SIGKILL))
                timer.daemon = True
                timer.start()
            self._save()
        return targeted

    def wait_gone(self, names: Iterable[str], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        wanted = set(names)
        with self._lock:
            while wanted & set(self._records):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True

    def _signal(self, record: LearnerRecord, sig: signal.Signals) -> None:
        if record.pid is None or record.finished:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(record.pid, sig)

    def _forget(self, record: LearnerRecord) -> None:
        self._records.pop(record.name, None)
        port_key = f"{record.job}/a{record.attempt}"
        if not any(f"{r.job}/a{r.attempt}" == port_key for r in self._records.values()):
            self._ports.pop(port_key, None)
            job_network.remove(self._network_path(record.job, record.attempt))
        shutil.rmtree(
            sidecar.learner_directory(record.job, record.learner, record.attempt),
            ignore_errors=True,
        )
        if record.uid is not None:
            # The uid is free for another learner from now on: nothing of this one's may
            # be left for it, neither a process, detached or not, nor a file in /tmp.
            program_identity.end_processes(record.uid)
            removed = program_identity.remove_files_of(record.uid, skip=[self.work_root])
            if removed:
                log.info("removed what uid %s left of %s: %s", record.uid, record.name, removed)
        if not self.keep_workdirs:
            workdir = Path(record.workdir)
            shutil.rmtree(workdir, ignore_errors=True)
            for parent in (workdir.parent, workdir.parent.parent):
                with contextlib.suppress(OSError):
                    parent.rmdir()
        self._changed.notify_all()


def learner_argv(command: Sequence[str], path: str) -> list[str] | None:
    """The command line the agent starts for a learner's `command`, or None if there is no
    such program. The runner (`dlaas-learner`) is the agent's own interpreter in isolated
    mode, never a program found on a PATH; any other command is looked up on the platform's
    `path`."""
    if not command:
        return None
    if command[0] == RUNNER_COMMAND:
        return [*runner_command(sys.executable), *command[1:]]
    executable = shutil.which(command[0], path=path)
    return None if executable is None else [executable, *command[1:]]


def nice_session(pid: int, niceness: int) -> None:
    """Lower the learner's session as a whole. Where the kernel groups processes by session
    for scheduling (`sched_autogroup_enabled`), a process's niceness only counts within its
    session, and a learner (a session of its own) competes with every other session as one
    unit at the session's own niceness, which is 0 unless set here."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/autogroup").write_text(f"{niceness}\n")
