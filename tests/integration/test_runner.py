"""The learner runner end to end: a real process, the real Redis, a local object store."""

from __future__ import annotations

import io
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from learner_image.launcher import HEARTBEAT_S
from storage import exit_reports, streams
from storage.exit_reports import ExitReport
from storage.object_store import LocalObjectStore, ObjectStore, open_object_store
from storage.settings import Settings
from tests import services

RUNNER_FAILURE = 3


def make_zip(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


@dataclass
class Learner:
    """One learner's working directory, object store and Redis view."""

    tmp: Path
    redis_url: str
    job_id: str = field(default_factory=lambda: f"training-{secrets.token_hex(5)}")
    learner: int = 1
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.objects: ObjectStore = LocalObjectStore(self.tmp / "objects")
        self.workdir = self.tmp / f"learner-{self.learner}"
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.redis = redis.Redis.from_url(self.redis_url)

    def put_model(self, files: dict[str, bytes]) -> None:
        self.objects.put_bytes(f"jobs/{self.job_id}/model.zip", make_zip(files))

    def environ(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DLAAS_")}
        env.update(
            DLAAS_HOME=str(self.tmp / "home"),
            DLAAS_OBJECT_STORE="local",
            DLAAS_OBJECTS_DIR=str(self.tmp / "objects"),
            DLAAS_REDIS_URL=self.redis_url,
            TRAINING_ID=self.job_id,
            LEARNER_ID=str(self.learner),
            NUM_LEARNERS="1",
            DLAAS_ATTEMPT="0",
            MODEL_DIR=str(self.workdir / "model"),
            DATA_DIR=str(self.workdir / "data"),
            RESULT_DIR=str(self.workdir / "results"),
            LOG_DIR=str(self.workdir / "logs"),
            CHECKPOINT_DIR=str(self.workdir / "checkpoints"),
            DLAAS_EXIT_REPORT=str(self.exit_report_path),
        )
        env.update(self.env)
        return env

    def start(self, command: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "learner_image.runner", "--", command],
            cwd=self.workdir,
            env=self.environ(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            umask=0o022,  # the usual one, with which a file written without a mode is 0644
        )

    def run(self, command: str, timeout: float = 60) -> tuple[int, str]:
        proc = self.start(command)
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out.decode("utf-8", "replace")

    @property
    def exit_report_path(self) -> Path:
        return self.tmp / "exit-report.json"

    def exit_report(self) -> ExitReport | None:
        return exit_reports.read(self.exit_report_path)

    def lines(self) -> list[str]:
        batches = streams.read_logs(self.redis, self.job_id, count=10**6)
        return [line for _, batch in batches for line in batch.lines]

    def metrics(self) -> list[streams.MetricRecord]:
        batches = streams.read_metrics(self.redis, self.job_id, count=10**6)
        return [m for _, batch in batches for m in batch.records()]

    def events(self) -> list[dict[str, str]]:
        found = []
        for _, event in streams.job_events(self.redis, self.job_id):
            if event.job == self.job_id:
                found.append(
                    {"kind": event.kind, "learner": str(event.learner)}
                    | {"attempt": str(event.attempt)}
                    | event.fields
                )
        return found

    def wait_for_line(self, text: str, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.lines():
                return
            time.sleep(0.05)
        raise AssertionError(f"no line {text!r} in {self.lines()}")

    def keys(self, prefix: str = "") -> list[str]:
        base = f"jobs/{self.job_id}/"
        return [info.key[len(base) :] for info in self.objects.list(base + prefix)]

    def cleanup(self) -> None:
        streams.delete_job_streams(self.redis, self.job_id)
        self.redis.close()


@pytest.fixture
def learner(tmp_path: Path, redis_url: str) -> Iterator[Learner]:
    one = Learner(tmp_path, redis_url)
    yield one
    one.cleanup()


TRAIN = b"""
import json, os, pathlib
print("hello")
print(json.dumps({"dlaas_metric": True, "step": 1, "loss": 0.5}))
print("step 2 loss 0.25")
data = pathlib.Path(os.environ["DATA_DIR"])
print("data:", sorted(str(p.relative_to(data)) for p in data.rglob("*") if p.is_file()))
print("cwd has train.py:", os.path.exists("train.py"))
print("secret visible:", "DLAAS_S3_SECRET_KEY" in os.environ)
out = pathlib.Path(os.environ["RESULT_DIR"])
(out / "sub").mkdir(parents=True, exist_ok=True)
(out / "model.txt").write_text("weights")
(out / "sub" / "more.txt").write_text("more")
"""


def test_runs_the_command_and_streams_logs_metrics_results(learner: Learner) -> None:
    learner.put_model({"train.py": TRAIN, "pkg/helper.py": b"X = 1\n"})
    learner.objects.put_bytes("data/u1/mnist/train.csv", b"1,2\n")
    learner.objects.put_bytes("data/u1/mnist/sub/test.csv", b"3,4\n")
    learner.env.update(
        DLAAS_DATA_PREFIX="data/u1/mnist/",
        DLAAS_METRIC_PATTERNS=json.dumps([r"step (?P<step>\d+) loss (?P<loss>[0-9.]+)"]),
        DLAAS_S3_SECRET_KEY="hush",
    )

    code, out = learner.run("python train.py")

    assert code == 0, out
    lines = learner.lines()
    assert lines[0] == "hello"
    assert "data: ['sub/test.csv', 'train.csv']" in lines
    assert "cwd has train.py: True" in lines
    assert "secret visible: False" in lines
    assert [(m.step, m.values) for m in learner.metrics()] == [
        (1, {"loss": 0.5}),
        (2, {"loss": 0.25}),
    ]

    stored_log = learner.objects.get_bytes(f"jobs/{learner.job_id}/logs/learner-1.log").decode()
    assert stored_log.splitlines() == lines
    stored_metrics = learner.objects.get_bytes(f"jobs/{learner.job_id}/metrics/learner-1.jsonl")
    records = [json.loads(line) for line in stored_metrics.splitlines()]
    assert [(r["learner"], r["step"], r["values"]) for r in records] == [
        (1, 1, {"loss": 0.5}),
        (1, 2, {"loss": 0.25}),
    ]
    assert learner.keys("results/") == ["results/model.txt", "results/sub/more.txt"]
    assert (learner.workdir / "model" / "pkg" / "helper.py").is_file()

    events = learner.events()
    assert [e.get("state", e["kind"]) for e in events] == [
        "DOWNLOADING",
        "RUNNING",
        "STORING",
        "exit",
    ]
    assert events[-1]["exit_code"] == "0"
    assert events[-1]["source"] == "command"
    assert all(e["learner"] == "1" and e["attempt"] == "0" for e in events)
    assert learner.redis.hget(streams.heartbeats_key(learner.job_id), "1") is not None


def test_other_learners_results_go_under_their_own_folder(learner: Learner) -> None:
    learner.put_model({"x.txt": b"x"})
    other = Learner(learner.tmp, learner.redis_url, job_id=learner.job_id, learner=2)
    other.env["NUM_LEARNERS"] = "2"
    code, out = other.run("echo r > $RESULT_DIR/out.txt && echo from-2")
    assert code == 0, out
    assert other.keys("results/") == ["results/learner-2/out.txt"]
    assert "from-2" in other.lines()


def test_a_learner_folder_the_program_made_itself_is_not_doubled(learner: Learner) -> None:
    # An FfDL-style program (its learners shared one RESULT_DIR) keeps its own folder.
    learner.put_model({"x.txt": b"x"})
    other = Learner(learner.tmp, learner.redis_url, job_id=learner.job_id, learner=2)
    other.env["NUM_LEARNERS"] = "2"
    other.env["DLAAS_RESTART_SCOPE"] = "learner"
    dirs = "mkdir -p $RESULT_DIR/learner-$LEARNER_ID"
    code, out = other.run(f"{dirs} && echo r > $RESULT_DIR/learner-$LEARNER_ID/out.txt")
    assert code == 0, out
    assert other.keys("results/") == ["results/learner-2/out.txt"]


WRITE_CHECKPOINTS = b"""
import json, os, pathlib, sys, time
root = pathlib.Path(os.environ["CHECKPOINT_DIR"])

def commit(step, payload):
    tmp = root / f".tmp-ckpt-{step}-{os.getpid()}"
    tmp.mkdir(parents=True)
    (tmp / "weights.bin").write_bytes(payload)
    (tmp / "opt").mkdir()
    (tmp / "opt" / "state.json").write_text("{}")
    files = {"weights.bin": len(payload), "opt/state.json": 2}
    (tmp / "COMMITTED").write_text(json.dumps({"step": step, "files": files, "time": time.time()}))
    os.rename(tmp, root / f"ckpt-{step:012d}")

# a half-written checkpoint and an abandoned temp directory are never uploaded
(root / "ckpt-000000000099").mkdir(parents=True)
(root / "ckpt-000000000099" / "weights.bin").write_bytes(b"partial")
(root / ".tmp-ckpt-98-1").mkdir()
(root / ".tmp-ckpt-98-1" / "COMMITTED").write_text("{}")
for step in (1, 2, 3):
    commit(step, bytes([step]) * 100)
    print("committed", step, flush=True)
    time.sleep(1.2)
"""


def test_uploads_committed_checkpoints_keeps_newest_and_skips_partial(learner: Learner) -> None:
    learner.put_model({"ckpt.py": WRITE_CHECKPOINTS})
    code, out = learner.run("python ckpt.py")
    assert code == 0, out

    keys = learner.keys("checkpoints/")
    names = sorted({key.split("/")[1] for key in keys})
    assert names == ["ckpt-000000000002", "ckpt-000000000003"]
    for name in names:
        assert f"checkpoints/{name}/COMMITTED" in keys
        assert f"checkpoints/{name}/weights.bin" in keys
        assert f"checkpoints/{name}/opt/state.json" in keys
    assert (
        learner.objects.get_bytes(
            f"jobs/{learner.job_id}/checkpoints/ckpt-000000000003/weights.bin"
        )
        == bytes([3]) * 100
    )
    uploaded = [e["name"] for e in learner.events() if e["kind"] == "checkpoint"]
    assert uploaded == ["ckpt-000000000001", "ckpt-000000000002", "ckpt-000000000003"]


def test_only_learner_one_uploads_checkpoints(learner: Learner) -> None:
    learner.put_model({"ckpt.py": WRITE_CHECKPOINTS.replace(b"(1, 2, 3)", b"(1,)")})
    other = Learner(learner.tmp, learner.redis_url, job_id=learner.job_id, learner=2)
    code, out = other.run("python ckpt.py")
    assert code == 0, out
    assert other.keys("checkpoints/") == []


def test_restores_the_newest_committed_checkpoint_before_the_command(learner: Learner) -> None:
    base = f"jobs/{learner.job_id}/checkpoints"
    for step, committed in ((4, True), (5, True), (7, False)):
        name = f"ckpt-{step:012d}"
        learner.objects.put_bytes(f"{base}/{name}/weights.bin", str(step).encode())
        learner.objects.put_bytes(f"{base}/{name}/nested/extra.txt", b"e")
        if committed:
            files = {"weights.bin": 1, "nested/extra.txt": 1}
            record = {"step": step, "files": files, "time": 1.0}
            learner.objects.put_bytes(f"{base}/{name}/COMMITTED", json.dumps(record).encode())
    learner.put_model({"x.txt": b""})

    code, out = learner.run(
        "ls -A $CHECKPOINT_DIR; cat $CHECKPOINT_DIR/ckpt-000000000005/weights.bin; echo;"
        " ls $CHECKPOINT_DIR/ckpt-000000000005"
    )

    assert code == 0, out
    assert learner.lines() == [
        "[dlaas] learner 1 resumes from checkpoint ckpt-000000000005",
        "ckpt-000000000005",
        "5",
        "COMMITTED",
        "nested",
        "weights.bin",
    ]
    # the restored checkpoint is reported as such, not uploaded again, and nothing was pruned
    checkpoint_events = [e for e in learner.events() if e["kind"] == "checkpoint"]
    assert [(e["name"], e.get("restored")) for e in checkpoint_events] == [
        ("ckpt-000000000005", "1")
    ]
    assert "checkpoints/ckpt-000000000004/COMMITTED" in learner.keys("checkpoints/")


def test_exit_code_of_the_command_is_reported(learner: Learner) -> None:
    learner.put_model({"x.txt": b""})
    code, out = learner.run("echo failing; exit 7")
    assert code == 7, out
    exit_event = learner.events()[-1]
    assert (exit_event["kind"], exit_event["exit_code"], exit_event["signal"]) == ("exit", "7", "")
    assert "code 7" in exit_event["reason"]
    assert learner.lines()[-1].startswith("[dlaas] ")
    # The same, left with the learner for whoever looks at it later.
    report = learner.exit_report()
    assert report is not None
    assert (report.exit_code, report.stopped, report.last_line) == (7, False, "failing")
    assert report.reason == exit_event["reason"]
    # The program's last line is no one else's business on the node.
    assert learner.exit_report_path.stat().st_mode & 0o777 == 0o600


def test_command_killed_by_a_signal(learner: Learner) -> None:
    learner.put_model({"x.txt": b""})
    code, out = learner.run("echo before; echo half > $RESULT_DIR/model.txt; kill -KILL $$")
    assert code == 128 + signal.SIGKILL, out
    exit_event = learner.events()[-1]
    assert exit_event["exit_code"] == "137"
    assert exit_event["signal"] == "SIGKILL"
    assert "killed by SIGKILL" in exit_event["reason"]
    assert exit_event["stopped"] == "0"  # killed, not told to stop
    assert "STORING" not in [e.get("state") for e in learner.events()]
    assert learner.keys("results/") == []
    assert learner.keys("logs/") == ["logs/learner-1.log"]


def test_sigterm_is_forwarded_to_the_command(learner: Learner) -> None:
    learner.put_model({"x.txt": b""})
    proc = learner.start("echo ready; sleep 30")
    learner.wait_for_line("ready")
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=20)
    assert proc.returncode == 128 + signal.SIGTERM
    exit_event = learner.events()[-1]
    assert exit_event["reason"] == "stopped by SIGTERM"
    assert exit_event["signal"] == "SIGTERM"
    assert exit_event["stopped"] == "1"
    assert "STORING" not in [e.get("state") for e in learner.events()]
    assert learner.keys("logs/") == ["logs/learner-1.log"]
    report = learner.exit_report()
    assert report is not None
    assert (report.exit_code, report.signal, report.stopped) == (143, "SIGTERM", True)


def test_command_ignoring_sigterm_is_killed_after_the_grace_period(learner: Learner) -> None:
    learner.put_model({"x.txt": b""})
    learner.env["DLAAS_STOP_GRACE_S"] = "0.5"
    proc = learner.start("trap '' TERM; echo ready; while true; do sleep 0.1; done")
    learner.wait_for_line("ready")
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=20)
    assert time.monotonic() - started < 5
    assert proc.returncode == 128 + signal.SIGKILL
    assert "after the grace period" in learner.events()[-1]["reason"]


def test_corrupt_archive_is_a_runner_failure(learner: Learner) -> None:
    learner.objects.put_bytes(f"jobs/{learner.job_id}/model.zip", b"this is not a zip file")
    code, out = learner.run("echo never")
    assert code == RUNNER_FAILURE, out
    exit_event = learner.events()[-1]
    assert exit_event["source"] == "runner"
    assert exit_event["exit_code"] == str(RUNNER_FAILURE)
    assert exit_event["reason"].startswith("the model archive was rejected")
    assert "never" not in learner.lines()
    assert learner.lines()[-1] == f"[dlaas] {exit_event['reason']}"
    assert learner.keys("logs/") == ["logs/learner-1.log"]


def test_zip_slip_archive_is_rejected_and_writes_nothing_outside(learner: Learner) -> None:
    learner.put_model({"train.py": b"", "../escaped.txt": b"x"})
    code, out = learner.run("echo never")
    assert code == RUNNER_FAILURE, out
    assert learner.events()[-1]["reason"].startswith("the model archive was rejected")
    assert not (learner.workdir / "escaped.txt").exists()
    assert not (learner.tmp / "escaped.txt").exists()


def test_missing_archive_is_a_runner_failure(learner: Learner) -> None:
    code, out = learner.run("echo never")
    assert code == RUNNER_FAILURE, out
    reason = learner.events()[-1]["reason"]
    assert reason.startswith("could not fetch the model archive")
    assert "never" not in learner.lines()


def test_unreachable_redis_is_a_runner_failure_on_stderr(learner: Learner) -> None:
    learner.put_model({"x.txt": b""})
    learner.redis_url = "redis://127.0.0.1:1/0"
    code, out = learner.run("sleep 30", timeout=30)
    assert code == RUNNER_FAILURE
    assert "could not reach Redis at redis://127.0.0.1:1/0" in out


def test_pretend_gpus_run_on_cpu_and_learner_one_tells_the_job_once(learner: Learner) -> None:
    learner.put_model({"x.txt": b""})
    show = "echo gpus=$DLAAS_PRETEND_GPUS cuda=[${CUDA_VISIBLE_DEVICES-unset}]"
    note = (
        "[dlaas] the 2 GPUs per learner are pretend and the job runs on CPU: this node's GPUs "
        "are configured with DLAAS_LOCAL_GPUS"
    )
    for one in (learner, Learner(learner.tmp, learner.redis_url, job_id=learner.job_id, learner=2)):
        one.env.update(NUM_LEARNERS="2", DLAAS_PRETEND_GPUS="2", CUDA_VISIBLE_DEVICES="")
        code, out = one.run(show)
        assert code == 0, out
    lines = learner.lines()
    assert lines.count("gpus=2 cuda=[]") == 2  # both programs see no CUDA device
    assert lines.count(note) == 1


def test_a_new_attempt_continues_the_stored_log(learner: Learner) -> None:
    learner.put_model({"x.txt": b""})
    code, out = learner.run("echo from attempt 0")
    assert code == 0, out
    again = Learner(learner.tmp / "again", learner.redis_url, job_id=learner.job_id)
    again.objects = learner.objects
    again.env.update(DLAAS_OBJECTS_DIR=str(learner.tmp / "objects"), DLAAS_ATTEMPT="1")
    code, out = again.run("echo from attempt 1")
    assert code == 0, out
    stored = learner.objects.get_bytes(f"jobs/{learner.job_id}/logs/learner-1.log").decode()
    assert stored.splitlines() == ["from attempt 0", "from attempt 1"]
    assert [e["attempt"] for e in learner.events() if e["kind"] == "exit"] == ["0", "1"]


def test_a_stopped_command_that_exits_zero_is_not_a_success(learner: Learner) -> None:
    learner.put_model({"x.txt": b""})
    proc = learner.start("trap 'echo bye; exit 0' TERM; echo ready; sleep 30 & wait")
    learner.wait_for_line("ready")
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=20)
    assert proc.returncode == 128 + signal.SIGTERM
    exit_event = learner.events()[-1]
    assert (exit_event["exit_code"], exit_event["signal"]) == ("143", "SIGTERM")
    assert exit_event["reason"] == "stopped by SIGTERM (the command then exited with code 0)"
    assert "bye" in learner.lines()


def test_a_stopped_command_sends_no_heartbeats(learner: Learner) -> None:
    learner.put_model({"x.txt": b""})
    proc = learner.start("echo $$ > $RESULT_DIR/pid; echo ready; kill -STOP $$; echo never")
    try:
        learner.wait_for_line("ready")
        shell = int((learner.workdir / "results" / "pid").read_text())
        deadline = time.monotonic() + 10
        while process_state(shell) != "T":  # until the shell has stopped itself
            assert time.monotonic() < deadline, process_state(shell)
            time.sleep(0.01)
        before = streams.get_heartbeats(learner.redis, learner.job_id)
        time.sleep(HEARTBEAT_S * 2)
        assert streams.get_heartbeats(learner.redis, learner.job_id) == before
    finally:
        proc.kill()  # the kernel then kills the stopped shell too
        proc.wait(timeout=10)


def test_the_command_dies_with_a_runner_killed_outright(learner: Learner) -> None:
    learner.put_model({"x.txt": b""})
    proc = learner.start("echo $$ > $RESULT_DIR/pid; echo ready; exec sleep 60")
    learner.wait_for_line("ready")
    pid = int((learner.workdir / "results" / "pid").read_text())
    proc.kill()
    proc.wait(timeout=10)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and process_alive(pid):
        time.sleep(0.05)
    assert not process_alive(pid)


def process_state(pid: int) -> str:
    """The process's state letter from /proc (R, S, T for stopped, ...)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "gone"
    return stat.rpartition(")")[2].split()[0]


def process_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_runs_against_an_s3_object_store(
    learner: Learner, s3_settings: Settings, seaweedfs: str, s3_bucket: str
) -> None:
    learner.objects = open_object_store(s3_settings)
    learner.env.update(services.s3_env(seaweedfs, s3_bucket))
    learner.env["DLAAS_DATA_PREFIX"] = "data/u/c/"
    learner.put_model(
        {"train.py": b"import os\nprint(open(os.environ['DATA_DIR'] + '/d.txt').read())\n"}
    )
    learner.objects.put_bytes("data/u/c/d.txt", b"from s3")
    put_committed(learner.objects, learner.job_id, 3, {"w": b"333"})

    code, out = learner.run(
        "python train.py && ls $CHECKPOINT_DIR && cp $CHECKPOINT_DIR/*/w $RESULT_DIR/w"
    )

    assert code == 0, out
    assert learner.lines() == [
        "[dlaas] learner 1 resumes from checkpoint ckpt-000000000003",
        "from s3",
        "ckpt-000000000003",
    ]
    assert learner.objects.get_bytes(f"jobs/{learner.job_id}/results/w") == b"333"
    assert learner.keys("logs/") == ["logs/learner-1.log"]


def put_committed(store: ObjectStore, job_id: str, step: int, files: dict[str, bytes]) -> None:
    name = f"ckpt-{step:012d}"
    for rel, data in files.items():
        store.put_bytes(f"jobs/{job_id}/checkpoints/{name}/{rel}", data)
    sizes = {rel: len(data) for rel, data in files.items()}
    record = {"step": step, "files": sizes, "time": 1.0}
    store.put_bytes(f"jobs/{job_id}/checkpoints/{name}/COMMITTED", json.dumps(record).encode())


FLOOD = b"""
import sys
write = sys.stdout.write
for i in range(100_000):
    write(f"step {i} loss {1 / (i + 1):.6f} and some words to make it longer\\n")
print("the last line")
"""


def test_a_flood_of_output_is_stored_whole_and_streamed_in_numbered_batches(
    learner: Learner,
) -> None:
    learner.put_model({"flood.py": FLOOD})
    learner.env["DLAAS_METRIC_PATTERNS"] = json.dumps([r"step (?P<step>\d+) loss (?P<loss>\S+)"])
    code, out = learner.run("python flood.py", timeout=120)
    assert code == 0, out
    written = [
        f"step {i} loss {1 / (i + 1):.6f} and some words to make it longer" for i in range(100_000)
    ]
    written.append("the last line")
    stored = learner.objects.get_bytes(f"jobs/{learner.job_id}/logs/learner-1.log").decode()
    assert stored.splitlines() == written
    points = learner.objects.get_bytes(f"jobs/{learner.job_id}/metrics/learner-1.jsonl")
    steps = [json.loads(line)["step"] for line in points.splitlines()]
    assert steps == list(range(100_000))
    live: dict[int, str] = {}
    for _, batch in streams.read_logs(learner.redis, learner.job_id, count=10**6):
        for number, line in enumerate(batch.lines, batch.first):
            assert number not in live
            live[number] = line
    assert all(written[number - 1] == line for number, line in live.items())
    assert live[len(written)] == "the last line"
    live_points = [m.step for m in learner.metrics()]
    assert live_points == sorted(live_points)


FAILING_SAVE = b"""
from learner_image import sdk

class Unpicklable:
    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        raise RuntimeError("cannot pickle this")

sdk.save_checkpoint({"n": 1}, 1, blocking=True)
sdk.save_checkpoint({"bad": Unpicklable()}, 2)
sdk.wait_for_checkpoints(30)
print("trained on")
"""


def test_a_checkpoint_that_fails_in_the_background_is_reported_to_the_job(
    learner: Learner,
) -> None:
    learner.put_model({"train.py": FAILING_SAVE})
    code, out = learner.run(f"{sys.executable} train.py", timeout=120)
    assert code == 0, out
    failed = [e for e in learner.events() if e["kind"] == "checkpoint" and e.get("failed")]
    assert failed == [
        {
            "kind": "checkpoint",
            "learner": "1",
            "attempt": "0",
            "name": "ckpt-000000000002",
            "step": "2",
            "failed": "RuntimeError: cannot pickle this",
        }
    ]
    stored = learner.objects.get_bytes(f"jobs/{learner.job_id}/logs/learner-1.log").decode()
    assert (
        "[dlaas] checkpoint ckpt-000000000002 could not be written: "
        "RuntimeError: cannot pickle this"
    ) in stored.splitlines()
    assert learner.keys("checkpoints/") == [
        "checkpoints/ckpt-000000000001/COMMITTED",
        "checkpoints/ckpt-000000000001/state.pt",
    ]


def test_a_learner_beats_while_it_still_fetches(tmp_path: Path, redis_url: str) -> None:
    """A fetch may outlast the heartbeat timeout (a large data set): the learner says it is
    alive from its DOWNLOADING report on, not only once its command runs."""
    learner = Learner(tmp_path, redis_url)
    archive = tmp_path / "objects" / "jobs" / learner.job_id / "model.zip"
    archive.parent.mkdir(parents=True)
    os.mkfifo(archive)  # the fetch waits on it until this test writes the archive
    proc = learner.start("echo trained")
    try:
        beats: list[float] = []
        deadline = time.monotonic() + 30
        while len(beats) < 2 and time.monotonic() < deadline:
            beat = streams.get_heartbeats(learner.redis, learner.job_id).get(1)
            if beat is not None and beat not in beats:
                beats.append(beat)
            time.sleep(0.05)
        assert len(beats) == 2, "no heartbeats while the archive was being fetched"
        assert [e["state"] for e in learner.events() if e["kind"] == "status"] == ["DOWNLOADING"]
        with open(archive, "wb") as writer:
            writer.write(make_zip({"train.py": b"print('hi')\n"}))
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out.decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
