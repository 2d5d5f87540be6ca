"""The CLI under a pipe whose reader goes away (`dlaas logs JOB | head -1`): it ends quietly,
as standard Unix tools do, with no error line and no traceback."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.unit.test_cli_stub_api import make_job, running_stub

CLI = [sys.executable, "-c", "from cli.main import app; app()"]


def _run_with_closed_reader(url: str, *args: str) -> tuple[int, str]:
    """Run `dlaas ARGS`, read one line of its stdout, then close the pipe; its exit code and
    what it printed on stderr."""
    command = [*CLI, "--url", url, "--token", "stub-token", *args]
    env = {**os.environ, "COLUMNS": "80"}
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.readline()
        process.stdout.close()
        stderr = process.stderr.read().decode()
        return process.wait(timeout=60), stderr


def test_logs_into_a_closed_pipe_end_quietly() -> None:
    with running_stub() as server:
        server.stub.jobs["job-1"] = make_job("job-1", state="RUNNING")
        # far more than a pipe buffer holds, so the writer meets the closed pipe
        server.stub.text_logs["job-1"] = {None: "".join(f"line {n}\n" for n in range(200_000))}
        code, stderr = _run_with_closed_reader(server.url, "logs", "job-1")
    assert "BrokenPipe" not in stderr and "error" not in stderr, stderr
    assert code == 141


def test_a_list_into_a_closed_pipe_ends_quietly() -> None:
    with running_stub() as server:
        for n in range(3000):
            server.stub.jobs[f"job-{n}"] = make_job(f"job-{n}")
        code, stderr = _run_with_closed_reader(server.url, "list", "--all")
    assert "BrokenPipe" not in stderr and "error" not in stderr, stderr
    assert code in (0, 141)
