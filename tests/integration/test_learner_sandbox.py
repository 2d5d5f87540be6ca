"""A program uid is handed to the next learner only once nothing of the last one's is
left: a hostile program's 0600 secrets in /tmp, /var/tmp and /dev/shm, a directory of its
own there, and the process it detached are gone before a learner of another job gets the
same uid."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from learner_image import program_sandbox
from learner_image.program_identity import SHARED_DIRS, processes_of
from learner_image.ps import sidecar
from learner_image.ps.region import ensure_directory
from lifecycle_manager.backends.base import LearnerPhase, LearnerSpec
from lifecycle_manager.backends.local.agent_learners import LearnerRecord, LearnerTable
from storage.object_store import LocalObjectStore
from tests.integration.ps_harness import wait_for
from tests.integration.test_runner import make_zip

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="program uids need the agent as root")

UID = 900_000 + os.getpid() % 50_000  # a uid no other test of the run hands out
SQUATTER = UID + 50_000  # another uid of the node's
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


def run(table: LearnerTable, job: str, command: list[str], learner: int = 1) -> LearnerRecord:
    spec = LearnerSpec(job_id=job, learner=learner, attempt=0, num_learners=2, command=command)
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


# One SGD step through the sidecar, run as the program's uid: what it found of its region.
PUSH = b"""
import json, os
import numpy as np
from learner_image.ps.client import ParameterServer
from learner_image.ps.layout import SGD, ModelLayout
c = ParameterServer(timeout=60)
c.attach(ModelLayout.of([("w", (16,))]), SGD(lr=0.5), np.ones(16, np.float32))
c.gradient[:] = 2.0
c.push()
region = os.environ["DLAAS_PS_DIR"]
print(json.dumps({
    "uid": os.getuid(),
    "weight": float(c.weights[0]),
    "version": c.version,
    "control_owner": os.stat(os.path.join(region, "control")).st_uid,
    "shm": sorted(os.listdir("/dev/shm")),
}), flush=True)
"""


@pytest.mark.parametrize("mounts", ["shared", "private where the node allows"])
def test_a_parameter_server_job_runs_as_its_uid_in_a_region_no_one_else_made(
    tmp_path: Path, work_root: Path, redis_url: str, mounts: str
) -> None:
    job = f"training-psuid{os.getpid()}"
    # Another uid got there first: a directory for the learner's region, open to all.
    squatted = sidecar.learner_directory(job, 1, 0)
    (squatted / "region").mkdir(parents=True)
    (squatted / "region" / "planted").write_text("adopt me")
    for path in (squatted, squatted / "region", squatted / "region" / "planted"):
        os.chown(path, SQUATTER, SQUATTER)
        path.chmod(0o777)
    LocalObjectStore(tmp_path / "objects").put_bytes(
        f"jobs/{job}/model.zip", make_zip({"push.py": PUSH})
    )
    private_mounts = mounts != "shared" and program_sandbox.probe() is None
    table = LearnerTable(
        tmp_path / "agent",
        lambda record: True,
        grace=5.0,
        program_uids=range(UID, UID + 1),
        work_root=work_root,
        private_mounts=private_mounts,
    )
    # An interpreter every uid may run, with this checkout's packages.
    site = sysconfig.get_paths()["purelib"]
    checkout = Path(__file__).resolve().parents[2]
    program = f"PYTHONPATH={site}:{checkout} /usr/bin/python3 push.py"
    spec = LearnerSpec(
        job_id=job,
        learner=1,
        attempt=0,
        num_learners=1,
        command=[sys.executable, "-m", "learner_image.runner", "--", program],
        env={
            "DLAAS_PS_MODE": "sync",
            "DLAAS_PS_SNAPSHOT_INTERVAL": "0",
            "DLAAS_OBJECT_STORE": "local",
            "DLAAS_OBJECTS_DIR": str(tmp_path / "objects"),
            "DLAAS_HOME": str(tmp_path / "home"),
            "DLAAS_REDIS_URL": redis_url,
            "TRAINING_ID": job,
            "LEARNER_ID": "1",
            "NUM_LEARNERS": "1",
            "DLAAS_ATTEMPT": "0",
        },
    )
    record, _created = table.create(spec)
    wait_for(lambda: record.finished, 120, "the parameter-server learner to end")
    workdir = Path(record.workdir)
    log = (workdir / "runner" / "learner-1.log").read_text()
    assert record.phase == LearnerPhase.SUCCEEDED.value, (workdir / "runner.log").read_text() + log
    [line] = [json.loads(text) for text in log.splitlines() if text.startswith('{"uid"')]
    assert (line["uid"], line["weight"], line["version"]) == (UID, 0.0, 1)  # 1 - 0.5 * 2
    assert line["control_owner"] == UID  # made by the root sidecar, for the program
    if private_mounts:
        assert line["shm"] == [squatted.name]  # its own /dev/shm: its region alone
    else:
        assert squatted.name in line["shm"]  # the node's /dev/shm, as where mounts are refused
    home = squatted.lstat()
    assert (home.st_uid, stat.S_IMODE(home.st_mode)) == (0, 0o711)
    region = sidecar.region_directory(job, 1, 0)
    assert (region.stat().st_uid, stat.S_IMODE(region.stat().st_mode)) == (UID, 0o700)
    assert not (region / "planted").exists()
    table.delete([record.name])
    assert table.wait_gone([record.name], 10)
    assert not squatted.exists()


def test_a_region_someone_else_made_is_never_taken(tmp_path: Path) -> None:
    shared = tmp_path / "shm"  # as /dev/shm: every uid may make a directory there
    shared.mkdir()
    shared.chmod(0o1777)
    squatted = shared / "dlaas-ps-training-x-1"
    squatted.mkdir()
    squatted.chmod(0o777)
    with pytest.raises(PermissionError, match="not a parameter-server region"):
        ensure_directory(squatted)
    squatted.chmod(0o700)
    os.chown(squatted, SQUATTER, SQUATTER)
    with pytest.raises(PermissionError, match=f"uid {SQUATTER}"):
        ensure_directory(squatted)
    (shared / "link").symlink_to(tmp_path)
    with pytest.raises(PermissionError):
        ensure_directory(shared / "link")
    assert stat.S_IMODE(ensure_directory(shared / "fresh").root.stat().st_mode) == 0o700
    # The node agent's layout: the program's region, in a directory of root's closed to it.
    agents = shared / "dlaas-ps-training-y-1-a0"
    agents.mkdir(mode=0o711)
    (agents / "region").mkdir(mode=0o700)
    os.chown(agents / "region", SQUATTER, SQUATTER)
    assert ensure_directory(agents / "region").root == agents / "region"


def test_a_jobs_learners_share_a_network_of_their_own_until_the_last_is_gone(
    tmp_path: Path, work_root: Path
) -> None:
    refused = program_sandbox.probe()
    assert refused is None, f"this node refuses namespaces: {refused}"
    table = LearnerTable(
        tmp_path / "agent",
        lambda record: True,
        grace=1.0,
        program_uids=range(UID, UID + 3),
        work_root=work_root,
        private_mounts=True,
    )
    show = [sys.executable, "-c", "import os; print(os.environ['DLAAS_PROGRAM_NETWORK'])"]
    records = [
        run(table, job, show, learner)
        for job, learner in (("training-net-a", 1), ("training-net-a", 2), ("training-net-b", 1))
    ]
    networks = [(Path(r.workdir) / "runner.log").read_text().strip() for r in records]
    assert networks[0] == networks[1] != networks[2]
    assert all(os.path.ismount(path) for path in networks)
    table.delete([records[0].name])
    assert table.wait_gone([records[0].name], 10)
    assert os.path.ismount(networks[0])  # learner 2 of the job is still there
    table.delete([records[1].name, records[2].name])
    assert table.wait_gone([records[1].name, records[2].name], 10)
    assert not any(Path(path).exists() for path in networks)
