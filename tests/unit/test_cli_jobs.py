"""Job commands against the HTTP contract stub: submit, list, show, wait, halt/resume/delete,
and the one-line error messages."""

from __future__ import annotations

import json
import socket
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.test_cli_stub_api import StubServer, invoke, make_job, running_stub

MANIFEST = """\
name: mnist
learners: 1
framework:
  name: pytorch
  command: python train.py
"""


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLAAS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DLAAS_URL", raising=False)
    monkeypatch.delenv("DLAAS_TOKEN", raising=False)


@pytest.fixture
def stub() -> Iterator[StubServer]:
    with running_stub() as server:
        yield server


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "model" / "pkg").mkdir(parents=True)
    (root / "model" / "train.py").write_text("print('hi')\n")
    (root / "model" / "pkg" / "net.py").write_text("NET = 1\n")
    (root / "model" / "__pycache__").mkdir()
    (root / "model" / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"\0")
    (root / "model" / ".git").mkdir()
    (root / "model" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "manifest.yml").write_text(MANIFEST)
    return root


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- train -----------------------------------------------------------------------------------


def test_train_zips_the_directory_without_caches_and_prints_the_id(
    stub: StubServer, project: Path
) -> None:
    result = invoke(stub, "train", str(project / "manifest.yml"), str(project / "model"))
    assert result.exit_code == 0, result.output
    assert result.stdout == "training-stub00001\n"
    assert "dlaas logs training-stub00001 --follow" in result.stderr
    [submitted] = stub.stub.submitted
    assert sorted(submitted["names"]) == ["pkg/net.py", "train.py"]
    assert "python train.py" in submitted["manifest"]
    [post] = stub.stub.requests("POST", "/v2/jobs")
    assert int(post.headers["Content-Length"]) == len(post.body)


def test_train_sends_a_zip_as_it_is(stub: StubServer, project: Path, tmp_path: Path) -> None:
    archive = tmp_path / "code.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("main.py", "print(1)\n")
    result = invoke(stub, "-o", "json", "train", str(project / "manifest.yml"), str(archive))
    assert result.exit_code == 0, result.output
    job = json.loads(result.stdout)
    assert job["id"] == "training-stub00001"
    assert job["state"] == "QUEUED"
    assert stub.stub.submitted[0]["names"] == ["main.py"]


def test_train_defaults_the_model_to_the_manifest_directory(
    stub: StubServer, project: Path
) -> None:
    result = invoke(stub, "train", str(project / "manifest.yml"))
    assert result.exit_code == 0, result.output
    assert "manifest.yml" in stub.stub.submitted[0]["names"]
    assert "model/train.py" in stub.stub.submitted[0]["names"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.yml", "model"], "MANIFEST missing.yml: no such file"),
        (["manifest.yml", "nowhere"], "MODEL_DIR nowhere: no such file or directory"),
        (["manifest.yml", "manifest.yml"], "is a file but not a zip archive"),
        (["model", "model"], "is not a file"),
    ],
)
def test_train_checks_local_inputs_before_any_request(
    stub: StubServer,
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(project)
    result = invoke(stub, "train", *args)
    assert result.exit_code == 1
    assert message in result.stderr
    assert result.stdout == ""
    assert stub.stub.seen == []


@pytest.mark.parametrize("outside", ["file", "directory"])
def test_train_refuses_a_link_that_leaves_the_model_directory(
    stub: StubServer, project: Path, tmp_path: Path, outside: str
) -> None:
    secret = tmp_path / "secret"
    if outside == "file":
        secret.write_text("root:x:0:0\n")
    else:
        secret.mkdir()
        (secret / "key").write_text("k\n")
    link = project / "model" / "pkg" / "passwd"
    link.symlink_to(secret)
    result = invoke(stub, "train", str(project / "manifest.yml"), str(project / "model"))
    assert result.exit_code == 1
    assert (
        f"{link} is a symbolic link to {secret}, outside the model directory: copy what it "
        "points to into the directory, or remove the link"
    ) in " ".join(result.stderr.split())
    assert stub.stub.seen == []


def test_train_uploads_a_link_inside_the_model_directory_as_its_file(
    stub: StubServer, project: Path
) -> None:
    (project / "model" / "alias.py").symlink_to("pkg/net.py")
    result = invoke(stub, "train", str(project / "manifest.yml"), str(project / "model"))
    assert result.exit_code == 0, result.output
    assert sorted(stub.stub.submitted[0]["names"]) == ["alias.py", "pkg/net.py", "train.py"]


def test_train_shows_the_servers_manifest_detail(stub: StubServer, project: Path) -> None:
    (project / "manifest.yml").write_text("name: mnist\nframework:\n  name: pytorch\n")
    result = invoke(stub, "train", str(project / "manifest.yml"), str(project / "model"))
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: manifest.yml: invalid manifest: framework.command:")
    assert "add framework.command" in lines[0]
    assert "Traceback" not in result.output


def test_train_follow_exits_with_the_jobs_outcome(stub: StubServer, project: Path) -> None:
    stub.stub.sse_sessions["training-stub00001"] = [
        (
            [
                ("1-0", None, {"learner": 1, "line": "loss 0.1", "time": 1.0}),
                (None, "end", {"state": "COMPLETED"}),
            ],
            False,
        )
    ]
    stub.stub.sse_sessions["training-stub00002"] = [([(None, "end", {"state": "FAILED"})], False)]
    manifest, model = str(project / "manifest.yml"), str(project / "model")
    ok = invoke(stub, "train", manifest, model, "--follow")
    assert ok.exit_code == 0, ok.output
    assert ok.stdout.splitlines() == ["training-stub00001", "loss 0.1"]
    failed = invoke(stub, "train", manifest, model, "--follow")
    assert failed.exit_code == 1
    assert "job training-stub00002 ended FAILED" in failed.stderr


# -- list / show / actions -------------------------------------------------------------------


def test_list_json_and_text(stub: StubServer) -> None:
    stub.stub.jobs["training-a"] = make_job("training-a", "RUNNING")
    stub.stub.jobs["training-b"] = make_job("training-b", "FAILED", reason="out of memory")
    result = invoke(stub, "list", "--output", "json")
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert [job["id"] for job in body["jobs"]] == ["training-b", "training-a"]
    text = invoke(stub, "list")
    assert text.exit_code == 0
    assert "training-a" in text.stdout and "RUNNING" in text.stdout
    assert "out of memory" in text.stdout


def _add_jobs(stub: StubServer, count: int, state: str = "RUNNING") -> list[str]:
    ids = [f"training-{state.lower()}{n:04d}" for n in range(count)]
    for job_id in ids:
        stub.stub.jobs[job_id] = make_job(job_id, state)
    return ids


def _job_requests(stub: StubServer) -> list[dict[str, list[str]]]:
    return [seen.query for seen in stub.stub.requests("GET", "/v2/jobs") if seen.path == "/v2/jobs"]


def test_list_shows_the_first_page_and_says_how_to_see_the_rest(stub: StubServer) -> None:
    ids = _add_jobs(stub, 7)
    result = invoke(stub, "list", "--limit", "3")
    assert result.exit_code == 0, result.output
    assert [i for i in ids if i in result.stdout] == ids[-3:]
    assert "dlaas list --all" in result.stderr
    assert _job_requests(stub) == [{"limit": ["3"]}]

    as_json = invoke(stub, "list", "--limit", "3", "-o", "json")
    body = json.loads(as_json.stdout)
    assert [job["id"] for job in body["jobs"]] == ids[-1:-4:-1]
    assert body["next"]


def test_the_last_page_has_no_hint(stub: StubServer) -> None:
    _add_jobs(stub, 2)
    result = invoke(stub, "list")
    assert result.exit_code == 0, result.output
    assert "--all" not in result.stderr


def test_list_all_pages_through_every_job(stub: StubServer) -> None:
    ids = _add_jobs(stub, 250)
    result = invoke(stub, "list", "--all", "--limit", "100", "-o", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"jobs": [stub.stub.jobs[i] for i in reversed(ids)]}
    assert [q.get("cursor") for q in _job_requests(stub)] == [None, ["100"], ["200"]]
    text = invoke(stub, "list", "--all")
    assert all(job_id in text.stdout for job_id in ids)
    assert "--all" not in text.stderr


def test_list_filters_by_state_repeatedly_and_names_them_in_the_hint(stub: StubServer) -> None:
    failed = _add_jobs(stub, 3, "FAILED")
    halted = _add_jobs(stub, 2, "HALTED")
    _add_jobs(stub, 4, "RUNNING")
    result = invoke(stub, "list", "--state", "failed", "--state", "HALTED", "--limit", "4")
    assert result.exit_code == 0, result.output
    assert [q["state"] for q in _job_requests(stub)] == [["FAILED", "HALTED"]]
    assert "dlaas list --all --state FAILED --state HALTED" in result.stderr
    every = invoke(stub, "list", "--all", "--state", "FAILED", "--state", "HALTED", "-o", "json")
    listed = [job["id"] for job in json.loads(every.stdout)["jobs"]]
    assert sorted(listed) == sorted(failed + halted)
    none = invoke(stub, "list", "--state", "COMPLETED")
    assert "no jobs in those states" in none.stderr


def test_list_limit_out_of_range_is_a_usage_error(stub: StubServer) -> None:
    result = invoke(stub, "list", "--limit", "0")
    assert result.exit_code == 2
    assert stub.stub.seen == []


def test_show_includes_recent_events(stub: StubServer) -> None:
    stub.stub.jobs["training-a"] = make_job("training-a", "RUNNING")
    stub.stub.events["training-a"] = [
        {
            "time": f"2026-01-02T03:0{i}:00Z",
            "kind": "state",
            "from_state": "QUEUED",
            "to_state": "DEPLOYING",
            "reason": f"event {i}",
            "detail": {},
        }
        for i in range(5)
    ]
    result = invoke(stub, "show", "training-a", "--events", "2", "-o", "json")
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["job"]["id"] == "training-a"
    assert [e["reason"] for e in body["events"]] == ["event 3", "event 4"]
    text = invoke(stub, "show", "training-a")
    assert "python t.py" in text.stdout and "event 4" in text.stdout


def test_show_pages_through_the_events_to_the_most_recent(stub: StubServer) -> None:
    stub.stub.jobs["training-a"] = make_job("training-a", "RUNNING")
    stub.stub.events["training-a"] = [
        {"time": None, "kind": "restart", "reason": f"event {i}", "detail": {}} for i in range(150)
    ]
    result = invoke(stub, "show", "training-a", "--events", "2", "-o", "json")
    assert result.exit_code == 0, result.output
    assert [e["reason"] for e in json.loads(result.stdout)["events"]] == ["event 148", "event 149"]
    assert len(stub.stub.requests("GET", "/v2/jobs/training-a/events")) == 2


def test_halt_resume_delete(stub: StubServer) -> None:
    stub.stub.jobs["training-a"] = make_job("training-a", "RUNNING")
    halted = invoke(stub, "halt", "training-a", "-o", "json")
    assert json.loads(halted.stdout)["state"] == "RUNNING"
    stub.stub.jobs["training-a"]["state"] = "HALTED"
    resumed = invoke(stub, "resume", "training-a")
    assert resumed.stdout.startswith("resume requested: training-a is QUEUED again")
    deleted = invoke(stub, "delete", "training-a", "-o", "json")
    assert json.loads(deleted.stdout) == {"id": "training-a", "status": "deleting"}
    assert [s.path for s in stub.stub.seen] == [
        "/v2/jobs/training-a/halt",
        "/v2/jobs/training-a/resume",
        "/v2/jobs/training-a",
    ]


# -- wait ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("final", "code"), [("COMPLETED", 0), ("FAILED", 1), ("HALTED", 1)])
def test_wait_exit_codes(stub: StubServer, final: str, code: int) -> None:
    stub.stub.jobs["training-a"] = make_job("training-a")
    stub.stub.state_sequence["training-a"] = ["QUEUED", "RUNNING", "RECOVERING", final]
    result = invoke(stub, "wait", "training-a", "--interval", "0.05", "-o", "json")
    assert result.exit_code == code, result.output
    assert json.loads(result.stdout)["state"] == final
    assert len(stub.stub.requests("GET", "/v2/jobs/training-a")) == 4


def test_wait_rides_out_an_api_answering_503_while_it_restarts(stub: StubServer) -> None:
    stub.stub.jobs["training-a"] = make_job("training-a")
    stub.stub.state_sequence["training-a"] = ["RUNNING", "COMPLETED"]
    stub.stub.fail_with = (503, {"error": "unavailable", "detail": "restarting"})
    stub.stub.fail_times = 3
    result = invoke(stub, "wait", "training-a", "--interval", "0.05")
    assert result.exit_code == 0, result.output
    assert len(stub.stub.requests("GET", "/v2/jobs/training-a")) >= 5


def test_wait_times_out_with_exit_code_2(stub: StubServer) -> None:
    stub.stub.jobs["training-a"] = make_job("training-a", "RUNNING")
    result = invoke(stub, "wait", "training-a", "--timeout", "0.2", "--interval", "0.05")
    assert result.exit_code == 2
    assert "timed out after 0.2s" in result.stderr
    assert "still RUNNING" in result.stderr


# -- errors ----------------------------------------------------------------------------------


def test_connection_refused_says_to_start_dlaas(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = invoke(None, "--url", url, "list")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.strip() == (
        f"error: cannot reach dlaas at {url}: is it running? start it with `dlaas up`, "
        "or point DLAAS_URL / --url at your server"
    )


def test_bad_token_says_how_to_get_one(stub: StubServer) -> None:
    result = invoke(stub, "show", "training-a", token="nope")
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "error: authentication failed: set DLAAS_TOKEN or run `dlaas up` to write a token"
    )


def test_unknown_job_is_a_one_line_404(stub: StubServer) -> None:
    result = invoke(stub, "show", "training-nope", "--output", "json")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.strip() == "error: no job training-nope: see your jobs with `dlaas list`"


def test_a_deleted_job_is_said_to_be_deleted(stub: StubServer) -> None:
    detail = "job training-gone was deleted; its logs, checkpoints and results are gone"
    stub.stub.fail_with = (404, {"error": "deleted", "detail": detail, "field": "job_id"})
    for command in (["show", "training-gone"], ["wait", "training-gone"]):
        result = invoke(stub, *command)
        assert result.exit_code == 1
        assert result.stderr.strip() == f"error: {detail}"


def test_server_bug_is_reported_as_such(stub: StubServer) -> None:
    stub.stub.fail_with = (500, {"error": "internal", "detail": "dlaas hit an internal error"})
    result = invoke(stub, "list")
    assert result.exit_code == 1
    assert "dlaas server error 500 on GET /v2/jobs" in result.stderr
    assert "Traceback" not in result.output


def test_validation_errors_name_the_field(stub: StubServer) -> None:
    stub.stub.fail_with = (
        422,
        {"error": "invalid_request", "detail": "learner: Input should be >= 1", "field": "learner"},
    )
    result = invoke(stub, "halt", "training-a")
    assert result.exit_code == 1
    assert result.stderr.strip() == ("error: learner: Input should be >= 1 (422 invalid_request)")


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    result = invoke(None, "--url", f"http://127.0.0.1:{free_port()}", "--debug", "list")
    assert result.exit_code == 1
    assert result.exception is not None


def test_usage_errors_exit_2(stub: StubServer) -> None:
    assert invoke(stub, "show").exit_code == 2
    assert invoke(stub, "list", "--output", "yaml").exit_code == 2
