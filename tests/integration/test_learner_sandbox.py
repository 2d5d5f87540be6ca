"""A program uid is handed to the next learner only once nothing of the last one's is
left: a hostile program's 0600 secrets in /tmp, /var/tmp and /dev/shm, a directory of its
own there, and the process it detached are gone before a learner of another job gets the
same uid."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from learner_image.program_identity import SHARED_DIRS, processes_of
from lifecycle_manager.backends.base import LearnerPhase, LearnerSpec
from lifecycle_manager.backends.local.agent_learners import LearnerRecord, LearnerTable
from tests.integration.ps_harness import wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="program uids need the agent as root")

UID = 900_000 + os.getpid() % 50_000  # a uid no other test of the run hands out
# The program as the runner starts it, under the uid the agent gave the learner (the table
# alone starts its command as root): it leaves a secret 0600 where every uid may write and
# a process detached from its session, then exits.
PLANT = """
import json, os, sys
uid = int(os.environ["DLAAS_PROGRAM_UID"])
os.setgroups([]); os.setgid(uid); os.setuid(uid)
name = sys.argv[1]
for directory in sys.argv[2:]:
    fd = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"the first job's secret")
    os.close(fd)
os.makedirs(f"/tmp/{name}-dir/deeper")
if os.fork() == 0:
    os.setsid()
    os.execv("/bin/sleep", ["sleep", "300"])
"""
FIND = """
import json, os, sys
uid = int(os.environ["DLAAS_PROGRAM_UID"])
os.setgroups([]); os.setgid(uid); os.setuid(uid)
found = {}
for path in sys.argv[1:]:
    try:
        found[path] = open(path).read()
    except OSError as error:
        found[path] = type(error).__name__
print(json.dumps(found), flush=True)
"""


@pytest.fixture
def work_root() -> Iterator[Path]:
    """A directory every uid may enter (pytest's own are closed to others when root)."""
    path = Path(tempfile.mkdtemp())
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def run(table: LearnerTable, job: str, command: list[str]) -> LearnerRecord:
    spec = LearnerSpec(job_id=job, learner=1, attempt=0, num_learners=1, command=command)
    record, created = table.create(spec)
    assert created
    wait_for(lambda: record.finished, 30, f"the learner of {job} to end")
    return record


def test_the_next_holder_of_a_uid_finds_nothing_of_the_last(
    tmp_path: Path, work_root: Path
) -> None:
    table = LearnerTable(
        tmp_path / "agent",
        lambda record: True,
        grace=1.0,
        program_uids=range(UID, UID + 1),
        work_root=work_root,
    )
    name = f"dlaas-secret-{os.getpid()}"
    dirs = [str(d) for d in SHARED_DIRS]
    first = run(table, "training-planter", [sys.executable, "-c", PLANT, name, *dirs])
    runner_log = Path(first.workdir) / "runner.log"
    assert first.phase == LearnerPhase.SUCCEEDED.value, runner_log.read_text()
    assert runner_log.stat().st_mode & 0o777 == 0o600  # root's alone, like the exit report
    planted = [Path(d) / name for d in dirs]
    assert all(path.stat().st_uid == UID for path in planted)
    table.delete([first.name])
    assert table.wait_gone([first.name], 10)
    assert not processes_of(UID)
    assert not any(path.exists() for path in [*planted, Path(f"/tmp/{name}-dir")])
    second = run(table, "training-finder", [sys.executable, "-c", FIND, *map(str, planted)])
    assert second.uid == first.uid == UID
    output = (Path(second.workdir) / "runner.log").read_text()
    assert json.loads(output.splitlines()[-1]) == {str(p): "FileNotFoundError" for p in planted}
    table.delete([second.name])
    assert table.wait_gone([second.name], 10)
