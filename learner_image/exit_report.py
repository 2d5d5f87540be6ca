"""How a learner's command ended, as an exit code, a signal name and a reason for the user
(a `storage.exit_reports.ExitReport`, which the runner sends and leaves behind)."""

from __future__ import annotations

import signal

from storage.exit_reports import ExitReport


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def describe_exit(
    returncode: int, stop_signal: int | None = None, killed_after_grace: bool = False
) -> ExitReport:
    """Exit code, signal name and reason for how the command ended (Popen.returncode)."""
    if stop_signal is not None:
        # A stopped learner did not finish, however its command ended: never report success.
        how = f"stopped by {signal_name(stop_signal)}"
        if killed_after_grace:
            how += " (killed with SIGKILL after the grace period)"
        elif returncode >= 0:
            how += f" (the command then exited with code {returncode})"
        sig = -returncode if returncode < 0 else stop_signal
        return ExitReport(128 + sig, signal_name(sig), how, stopped=True)
    if returncode == 0:
        return ExitReport(0, None, "the command exited with code 0", stopped=False)
    if returncode < 0:
        name = signal_name(-returncode)
        reason = f"the command was killed by {name}"
        if -returncode == signal.SIGKILL:
            reason += " (possibly out of memory)"
        return ExitReport(128 - returncode, name, reason, stopped=False)
    if returncode > 128 and returncode - 128 < signal.NSIG:
        name = signal_name(returncode - 128)
        reason = f"the command exited with code {returncode} (killed by {name}"
        reason += ", possibly out of memory)" if returncode == 137 else ")"
        return ExitReport(returncode, name, reason, stopped=False)
    return ExitReport(returncode, None, f"the command exited with code {returncode}", stopped=False)
