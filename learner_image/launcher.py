"""The user's command as a learner runs it: started, stopped on request, its output logged.

`Launcher` runs `/bin/sh -c COMMAND` in MODEL_DIR, in a process group of its own (so stops
reach everything it started) within the caller's session, with the kernel SIGKILLing the
shell if the caller dies first (Linux). Its merged stdout/stderr goes at pipe speed to a
`LearnerLog`. A stop signal is forwarded to the command's group, followed by SIGKILL after
the grace period (at once on a second stop signal); processes the command leaves behind
are killed. Under a uid of its own (`program_uid`, a root runner) it owns its directories
and nothing else, and every process of that uid is ended with it.

It needs neither Redis nor the object store: the single-process runner and the program
container of a Kubernetes learner pod (`learner_image.pod.program`) run the same code.
`ProgramEnd` says how the command ended, for `learner_image.shipping` to report.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from learner_image import job_network, program_identity, program_sandbox
from learner_image.exit_report import describe_exit, signal_name
from learner_image.learner_log import LearnerLog, capture_output
from learner_image.runner_config import RunnerConfig, child_env
from storage.exit_reports import ExitReport

# The program's parameter-server region, which it must reach in a namespace of its own.
PS_DIR_ENV = "DLAAS_PS_DIR"
# How often a learner tells it is alive while its command runs (and is not frozen).
HEARTBEAT_S = 2.0
GROUP_POLL_S = 0.05


@dataclass(frozen=True)
class ProgramEnd:
    """How the command ended: `returncode` as Popen gives it (None: it never started),
    the stop signal the launcher was told (if any), whether it had to be SIGKILLed after
    the grace period, its last output line; `failure`, why it could not be started."""

    returncode: int | None
    stop_signal: int | None = None
    killed_after_grace: bool = False
    last_line: str = ""
    failure: str = ""

    def report(self) -> ExitReport:
        """The exit report of a command that ran (returncode set)."""
        assert self.returncode is not None
        report = describe_exit(self.returncode, self.stop_signal, self.killed_after_grace)
        return dataclasses.replace(report, last_line=self.last_line)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ProgramEnd:
        """Raises ValueError/TypeError/KeyError on a malformed record."""
        code, stop = raw["returncode"], raw["stop_signal"]
        return cls(
            returncode=None if code is None else int(code),
            stop_signal=None if stop is None else int(stop),
            killed_after_grace=bool(raw["killed_after_grace"]),
            last_line=str(raw["last_line"])[:500],
            failure=str(raw["failure"])[:2000],
        )


def stopped_before_start(stop_signal: int) -> ExitReport:
    name = signal_name(stop_signal)
    reason = f"stopped by {name} before the command started"
    return ExitReport(128 + stop_signal, name, reason, stopped=True)


class Launcher:
    def __init__(self, config: RunnerConfig, environ: Mapping[str, str]) -> None:
        self.config = config
        self.environ = environ
        self.stop_signal: int | None = None
        self.killed_after_grace = False
        self.child: subprocess.Popen[bytes] | None = None
        self._kill_timer: threading.Timer | None = None
        self._grace_ends = math.inf

    # stopping ------------------------------------------------------------------------------

    def stop(self, signum: int) -> None:
        """A stop signal for the command (safe in a signal handler): forwarded to its group,
        SIGKILL after the grace period; a second one SIGKILLs at once."""
        first = self.stop_signal is None
        if first:
            self.stop_signal = signum
        self._forward(escalate=not first)

    def _forward(self, escalate: bool = False) -> None:
        child = self.child
        if child is None or child.returncode is not None or self.stop_signal is None:
            return
        if escalate:
            signal_group(child.pid, signal.SIGKILL)
            return
        signal_group(child.pid, self.stop_signal)
        if self._kill_timer is None:
            self._grace_ends = time.monotonic() + self.config.stop_grace_s
            self._kill_timer = threading.Timer(self.config.stop_grace_s, self._grace_over)
            self._kill_timer.daemon = True
            self._kill_timer.start()

    def _grace_over(self) -> None:
        child = self.child
        if child is not None and child.poll() is None:
            self.killed_after_grace = True
            signal_group(child.pid, signal.SIGKILL)

    def frozen(self) -> bool:
        """Whether a process of the running command is stopped (SIGSTOP, a debugger): a
        learner whose program is frozen is hung, and sends no heartbeat."""
        child = self.child
        return child is not None and child.returncode is None and group_stopped(child.pid)

    # running -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the command (OSError if it cannot be)."""
        c = self.config
        env = child_env(c, self.environ)
        preexec = die_with_parent()
        as_program: dict[str, Any] = {}
        if c.program_uid is not None:
            program_identity.hand_over(c.program_dirs, c.program_uid)
            if c.program_tmp is not None:
                env["TMPDIR"] = str(c.program_tmp)
            # The hook drops to the program's uid itself: a namespace must be made first.
            preexec = program_sandbox.enter(self._sandbox(env))
            as_program = {"umask": 0o077}
        self.child = subprocess.Popen(
            ["/bin/sh", "-c", c.command],
            cwd=c.model_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            bufsize=0,
            stderr=subprocess.STDOUT,
            process_group=0,
            preexec_fn=preexec,
            **as_program,
        )
        if self.stop_signal is not None:
            self._forward()

    def _sandbox(self, env: Mapping[str, str]) -> program_sandbox.Sandbox:
        c = self.config
        assert c.program_uid is not None
        reached = [*c.program_dirs, *(Path(env[k]) for k in ("HOME", PS_DIR_ENV) if env.get(k))]
        private_mounts = c.private_mounts and c.program_tmp is not None
        # The node agent isolates programs only where the runner's interpreter can be shown.
        reveal = private_mounts and program_sandbox.revealed(program_sandbox.interpreter_paths())
        return program_sandbox.Sandbox(
            uid=c.program_uid,
            tmp_dir=c.program_tmp,
            private_mounts=private_mounts,
            keep=program_sandbox.kept_paths(reached),
            network=c.program_network,
            reveal=reveal or (),
            hosts=self._loopback_hosts() if private_mounts and c.program_network else None,
        )

    def _loopback_hosts(self) -> Path | None:
        """The hosts file the program's own network shows (in the runner's directory, out of
        the program's reach); None where the node has none to start from."""
        if self.config.runner_dir is None:
            return None
        try:
            text = job_network.HOSTS.read_text()
        except OSError:
            return None
        path = self.config.runner_dir / "hosts"
        path.write_text(job_network.loopback_hosts(text))
        path.chmod(0o644)
        return path

    def wait(self, log: LearnerLog) -> ProgramEnd:
        """Copy the command's output into `log` until it ends; then end what it left."""
        child = self.child
        assert child is not None and child.stdout is not None
        last_line = [""]
        stdout = child.stdout.fileno()

        def pump() -> None:
            last_line[0] = capture_output(stdout, log)

        reader = threading.Thread(target=pump, name="dlaas-output", daemon=True)
        reader.start()
        returncode = child.wait()
        if self.stop_signal is not None:
            self._let_group_finish(child.pid)
        if self._kill_timer is not None:
            self._kill_timer.cancel()
        if self.config.program_uid is not None:
            # Nothing of the program outlives it: no process of its uid may change its
            # files while they are stored (a file swapped for a link to one of root's).
            program_identity.end_processes(self.config.program_uid)
        reader.join(1.0)
        if reader.is_alive():  # something the command started still holds the pipe
            signal_group(child.pid, signal.SIGKILL)
            reader.join(5.0)
        return ProgramEnd(returncode, self.stop_signal, self.killed_after_grace, last_line[0])

    def _let_group_finish(self, pgid: int) -> None:
        """A stopped command's shell may end before what it started (a program saving its
        state on SIGTERM, `sh -c` not passing the signal on): the whole group has the rest of
        the grace period, then SIGKILL."""
        while group_alive(pgid):
            if time.monotonic() >= self._grace_ends:
                self.killed_after_grace = True
                signal_group(pgid, signal.SIGKILL)
                return
            time.sleep(GROUP_POLL_S)

    def kill(self) -> None:
        child = self.child
        if child is not None and child.poll() is None:
            signal_group(child.pid, signal.SIGKILL)
            child.wait()


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


def group_states(pgid: int) -> list[str]:
    """The states (R, S, T, Z, ...) of the processes of group `pgid`, from /proc (Linux)."""
    try:
        entries = list(os.scandir("/proc"))
    except OSError:
        return []
    states = []
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
        if group == str(pgid):
            states.append(state)
    return states


def group_stopped(pgid: int) -> bool:
    """Whether a process of group `pgid` is stopped (SIGSTOP, a debugger)."""
    return any(state in ("T", "t") for state in group_states(pgid))


def group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs: zombies do not count (where the
    launcher is a container's PID 1, nobody else reaps the orphans)."""
    return any(state != "Z" for state in group_states(pgid))


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
