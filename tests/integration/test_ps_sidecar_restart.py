"""A sidecar of a multi-pod job that restarts while its peers run on does not rejoin them
with a replica that is not theirs: every learner of the job fails promptly with the reason,
so that the job restarts as a gang from the agreed snapshot. A peer that vanishes for good
makes the others fail, naming it, rather than leaving them to run on alone or hang."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from learner_image.ps.region import S_APPLIED
from tests.integration import ps_harness
from tests.integration.ps_harness import ROOT, control, process_server, sidecar_args, wait_for

base = ps_harness.base

WORLD = 2
FAIL_WITHIN_S = 20.0


def learner(base: Path, rank: int) -> subprocess.Popen[bytes]:
    """A learner that pushes until it is stopped (or fails)."""
    with open(base / f"learner-{rank}.log", "wb") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.integration.ps_stress_learner",
                str(base / f"region-{rank}"),
                "0",
                str(10**12),
                str(rank),
            ],
            cwd=ROOT,
            stderr=log,
        )


class Job:
    """Two sidecars (processes, as on two pods) and a learner beside each."""

    def __init__(self, base: Path, mode: str, peer_timeout: float) -> None:
        self.base, self.mode, self.peer_timeout = base, mode, peer_timeout
        self.sidecars = [self.start_sidecar(rank) for rank in range(WORLD)]
        self.learners = [learner(base, rank) for rank in range(WORLD)]
        controls = [control(base / f"region-{rank}") for rank in range(WORLD)]
        wait_for(
            lambda: all(int(c.server[S_APPLIED]) > 50 for c in controls), 60, "training to run"
        )

    def start_sidecar(self, rank: int) -> subprocess.Popen[bytes]:
        return process_server(
            sidecar_args(
                self.base, rank, WORLD, [self.mode], ["--peer-timeout", str(self.peer_timeout)]
            ),
            self.base / f"sidecar-{rank}.log",
        )

    def kill_sidecar(self, rank: int) -> None:
        self.sidecars[rank].send_signal(signal.SIGKILL)
        self.sidecars[rank].wait(10)

    def wait_learners_fail(self, ranks: range = range(WORLD)) -> list[str]:
        """The learners of `ranks` exit non-zero within `FAIL_WITHIN_S`; what each wrote."""
        deadline = time.monotonic() + FAIL_WITHIN_S
        for rank in ranks:
            process = self.learners[rank]
            try:
                code = process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"learner {rank} still runs {FAIL_WITHIN_S:g} s on: {self.logs()}")
            assert code != 0, f"learner {rank} exited 0"
        return [(self.base / f"learner-{rank}.log").read_text() for rank in ranks]

    def logs(self) -> str:
        return "\n".join(p.read_text()[-2000:] for p in sorted(self.base.glob("*.log")))

    def stop(self) -> None:
        for process in [*self.learners, *self.sidecars]:
            if process.poll() is None:
                process.kill()
            process.wait(10)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_sidecar_restarted_while_its_peer_runs_on_fails_the_job_with_the_reason(
    base: Path, mode: str
) -> None:
    job = Job(base, mode, peer_timeout=60)
    try:
        job.kill_sidecar(1)
        time.sleep(0.3)  # its peer and its learner run on (or wait) meanwhile
        job.sidecars[1] = job.start_sidecar(1)  # what the kubelet or `--supervise` does
        started = time.monotonic()
        own, peer = job.wait_learners_fail()[::-1]
        assert time.monotonic() - started < FAIL_WITHIN_S
        assert (
            "ServerFailed: parameter-server sidecar rank 1 restarted while its peers ran on; "
            "the job restarts as a gang from the agreed snapshot" in own
        ), job.logs()
        assert "ServerFailed: peer sidecar rank 1 at 127.0.0.1:" in peer, job.logs()
        assert "restarted while this sidecar ran on" in peer
        for sidecar in job.sidecars:  # both stop, saying why
            assert sidecar.wait(FAIL_WITHIN_S) == 2, job.logs()
        assert "peer sidecar rank 1 at" in (base / "sidecar-0.log").read_text()
    finally:
        job.stop()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_vanished_peer_fails_the_job_naming_it(base: Path, mode: str) -> None:
    job = Job(base, mode, peer_timeout=2)
    try:
        job.kill_sidecar(1)  # and it never comes back
        (peer,) = job.wait_learners_fail(range(1))  # the learner of rank 1 waits for its own
        assert "ServerFailed: peer sidecar rank 1 at 127.0.0.1:" in peer, job.logs()
        assert job.sidecars[0].wait(FAIL_WITHIN_S) == 2, job.logs()
    finally:
        job.stop()


def test_a_peer_that_stopped_on_purpose_is_not_taken_for_vanished(base: Path) -> None:
    job = Job(base, "async", peer_timeout=1)
    try:
        job.learners[1].kill()  # its learners finished: the pod stops its sidecar
        job.sidecars[1].send_signal(signal.SIGTERM)
        assert job.sidecars[1].wait(FAIL_WITHIN_S) == 0, job.logs()
        ctl = control(base / "region-0")
        applied = int(ctl.server[S_APPLIED])
        time.sleep(3)  # three times --peer-timeout
        assert job.learners[0].poll() is None, job.logs()
        assert job.sidecars[0].poll() is None, job.logs()
        assert int(ctl.server[S_APPLIED]) > applied  # rank 0 trains on alone
    finally:
        job.stop()
