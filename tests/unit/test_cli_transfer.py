"""Results, metrics, data and cluster commands against the HTTP contract stub."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.errors import CliError
from cli.results import safe_target
from tests.unit.test_cli_stub_api import StubServer, invoke, make_job, running_stub


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLAAS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DLAAS_URL", raising=False)
    monkeypatch.delenv("DLAAS_TOKEN", raising=False)


@pytest.fixture
def stub() -> Iterator[StubServer]:
    with running_stub() as server:
        server.stub.jobs["training-a"] = make_job("training-a", "COMPLETED", learners=2)
        yield server


def test_download_writes_every_result_under_dest(stub: StubServer, tmp_path: Path) -> None:
    big = bytes(range(256)) * 9000
    stub.stub.results["training-a"] = {"model.pt": big, "logs/summary.txt": b"ok\n"}
    dest = tmp_path / "out"
    result = invoke(stub, "download", "training-a", "--dest", str(dest), "-o", "json")
    assert result.exit_code == 0, result.output
    assert (dest / "model.pt").read_bytes() == big
    assert (dest / "logs" / "summary.txt").read_bytes() == b"ok\n"
    body = json.loads(result.stdout)
    assert body["dest"] == str(dest.resolve())
    assert [(f["path"], f["size"]) for f in body["files"]] == [
        ("logs/summary.txt", 3),
        ("model.pt", len(big)),
    ]
    assert not [p for p in dest.rglob("*") if p.name.endswith(".part")]


def test_download_defaults_to_a_directory_named_after_the_job(
    stub: StubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    stub.stub.results["training-a"] = {"w.bin": b"w"}
    result = invoke(stub, "download", "training-a")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "training-a" / "w.bin").read_bytes() == b"w"


@pytest.mark.parametrize("bad", ["../escape.txt", "/etc/passwd", "a/../../b", "..", "c:/x"])
def test_download_refuses_paths_escaping_dest(stub: StubServer, tmp_path: Path, bad: str) -> None:
    stub.stub.results["training-a"] = {"fine.txt": b"fine"}
    stub.stub.result_listing["training-a"] = [
        {"path": "fine.txt", "size": 4},
        {"path": bad, "size": 1},
    ]
    dest = tmp_path / "inner" / "dest"
    result = invoke(stub, "download", "training-a", "--dest", str(dest))
    assert result.exit_code == 1
    assert f"refusing to download {bad!r}" in result.stderr
    assert not dest.exists()
    assert not stub.stub.requests("GET", "/v2/jobs/training-a/results/")
    assert not any(p.is_file() for p in tmp_path.rglob("*"))


def test_download_pages_through_every_result(stub: StubServer, tmp_path: Path) -> None:
    files = {f"part-{n:03d}.bin": bytes([n]) for n in range(130)}
    stub.stub.results["training-a"] = files
    dest = tmp_path / "out"
    result = invoke(stub, "download", "training-a", "--dest", str(dest), "-o", "json")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in dest.iterdir()) == sorted(files)
    listings = [s for s in stub.stub.seen if s.path == "/v2/jobs/training-a/results"]
    assert [s.query.get("cursor") for s in listings] == [None, ["100"]]


def test_safe_target_refuses_symlinked_escapes(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "link").symlink_to(tmp_path)
    assert safe_target(dest, "a/b.txt") == (dest / "a" / "b.txt").resolve()
    with pytest.raises(CliError, match="outside"):
        safe_target(dest, "link/secret.txt")


def test_download_of_a_missing_file_names_it(stub: StubServer, tmp_path: Path) -> None:
    stub.stub.result_listing["training-a"] = [{"path": "gone.bin", "size": 3}]
    result = invoke(stub, "download", "training-a", "--dest", str(tmp_path / "d"))
    assert result.exit_code == 1
    assert "job training-a has no result 'gone.bin'" in result.stderr
    assert not list((tmp_path / "d").iterdir())


def test_metrics_table_and_json(stub: StubServer) -> None:
    stub.stub.metrics["training-a"] = [
        {"learner": 1, "time": 1700000000.0, "step": 10, "values": {"loss": 0.5}},
        {"learner": 2, "time": 1700000001.0, "step": 20, "values": {"loss": 0.25, "acc": 0.9}},
    ]
    result = invoke(stub, "metrics", "training-a", "--output", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["metrics"][1]["values"] == {"loss": 0.25, "acc": 0.9}
    text = invoke(stub, "metrics", "training-a", "--tail", "1")
    header, row = text.stdout.strip().splitlines()
    assert header.split() == ["LEARNER", "STEP", "TIME", "loss", "acc"]
    assert row.split()[:2] == ["2", "20"] and row.split()[-2:] == ["0.25", "0.9"]


def test_data_upload_directory_and_list(stub: StubServer, tmp_path: Path) -> None:
    source = tmp_path / "mnist"
    (source / "train").mkdir(parents=True)
    (source / "train" / "x.bin").write_bytes(b"x" * (3 << 20))
    (source / "labels.txt").write_text("0 1 2\n")
    result = invoke(stub, "data", "upload", "digits", str(source), "-o", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "container": "digits",
        "files": [{"path": "labels.txt", "size": 6}, {"path": "train/x.bin", "size": 3 << 20}],
    }
    assert stub.stub.data["digits"]["train/x.bin"] == b"x" * (3 << 20)
    puts = stub.stub.requests("PUT", "/v2/data/digits/")
    assert all(int(p.headers["Content-Length"]) == len(p.body) for p in puts)

    listing = invoke(stub, "data", "list", "digits")
    assert listing.exit_code == 0
    assert "train/x.bin" in listing.stdout and "3.0 MiB" in listing.stdout


def test_data_list_pages_through_every_file(stub: StubServer) -> None:
    stub.stub.data["digits"] = {f"shard-{n:03d}.npz": b"x" * n for n in range(230)}
    result = invoke(stub, "data", "list", "digits", "-o", "json")
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)["files"]
    assert [f["path"] for f in listed] == sorted(stub.stub.data["digits"])
    assert len(stub.stub.requests("GET", "/v2/data/digits")) == 3


def test_data_upload_single_file_keeps_its_name(stub: StubServer, tmp_path: Path) -> None:
    source = tmp_path / "one file.csv"
    source.write_text("a,b\n")
    result = invoke(stub, "data", "upload", "tables", str(source))
    assert result.exit_code == 0, result.output
    assert stub.stub.data["tables"] == {"one file.csv": b"a,b\n"}


def test_data_upload_missing_path_is_refused_locally(stub: StubServer, tmp_path: Path) -> None:
    result = invoke(stub, "data", "upload", "digits", str(tmp_path / "nope"))
    assert result.exit_code == 1
    assert "PATH" in result.stderr and "no such file or directory" in result.stderr
    assert stub.stub.seen == []


def test_cluster_text_and_json(stub: StubServer) -> None:
    body = json.loads(invoke(stub, "cluster", "-o", "json").stdout)
    assert body["backend"] == "local"
    text = invoke(stub, "cluster").stdout
    assert (
        "backend: local" in text
        and "node-a" in text
        and "1 learner holding room" in text
        and "published" not in text
    )
    assert "1.0 GiB" in text and "MEMORY" in text and "1073741824" not in text, text


def test_usage_shows_what_is_kept_and_the_quota(stub: StubServer) -> None:
    stub.stub.usage = {
        "data_bytes": 3 * 1024**3,
        "results_bytes": 512 * 1024**2,
        "used_bytes": 3 * 1024**3 + 512 * 1024**2,
        "quota_bytes": 100 * 1024**3,
        "left_bytes": 100 * 1024**3 - 3 * 1024**3 - 512 * 1024**2,
    }
    result = invoke(stub, "usage")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["data", "containers", "3.0", "GiB"]
    assert "of 100.0 GiB" in lines[2] and "left" in lines[2]
    assert json.loads(invoke(stub, "usage", "-o", "json").stdout) == stub.stub.usage
    stub.stub.usage = {**stub.stub.usage, "quota_bytes": None, "left_bytes": None}
    assert "(no quota)" in invoke(stub, "usage").stdout
