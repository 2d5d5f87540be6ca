"""`sdk.watch_for_stop`: SIGTERM becomes a request the loop reads; a second SIGTERM or the
grace period ends the program at once; either way with 143. Each case runs a small program
in its own process (a handler installed in the test process would outlive the test)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

from learner_image.sdk import EXIT_STOPPED

PROGRAM = """
import sys, time
from learner_image import sdk

stop = sdk.watch_for_stop(grace_s={grace})
assert sdk.watch_for_stop(grace_s=99) is stop  # one per process
print("ready", flush=True)
step = 0
while True:
    step += 1
    time.sleep(0.001)
    if {checks} and stop.requested:
        print(f"saved step {{step}}", flush=True)
        stop.exit()
"""


def start(grace: float, checks: bool) -> subprocess.Popen[str]:
    source = textwrap.dedent(PROGRAM.format(grace=grace, checks=checks))
    child = subprocess.Popen(
        [sys.executable, "-c", source],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline() == "ready\n"
    return child


def test_the_loop_sees_the_request_saves_and_exits_143() -> None:
    child = start(grace=60, checks=True)
    child.send_signal(signal.SIGTERM)
    out, err = child.communicate(timeout=60)
    assert child.returncode == EXIT_STOPPED == 143
    assert out.startswith("saved step ")
    assert "SIGTERM received; checkpointing at the next step (at most 60 s)" in err


def test_a_second_sigterm_ends_a_program_that_does_not_look() -> None:
    child = start(grace=600, checks=False)
    child.send_signal(signal.SIGTERM)
    assert child.stderr is not None
    assert "SIGTERM received" in child.stderr.readline()
    child.send_signal(signal.SIGTERM)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 143
    assert out == ""


def test_the_grace_period_ends_a_program_that_does_not_look() -> None:
    child = start(grace=0.2, checks=False)
    child.send_signal(signal.SIGTERM)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 143
    assert out == ""
    assert "at most 0.2 s" in err
