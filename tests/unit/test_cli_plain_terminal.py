"""The CLI in a plain terminal: stdout not a TTY, COLUMNS=80. Every table row is one line
of at most 80 columns, long free text cut with "…" and shown whole with `--wide`; sizes
read in units, while `--output json` keeps the server's numbers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.output import format_field, format_size
from tests.unit.test_cli_stub_api import StubServer, invoke, make_job, running_stub

LONG_NAME = "resnet50-imagenet-baseline-with-mixed-precision-and-label-smoothing"
LONG_REASON = (
    "learner 2 exited with code 137 (killed: out of memory) after 3 restarts; "
    "the restart policy gives up after 3"
)
WIDTH = 80


@pytest.fixture(autouse=True)
def plain_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLAAS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DLAAS_URL", raising=False)
    monkeypatch.delenv("DLAAS_TOKEN", raising=False)
    monkeypatch.setenv("COLUMNS", str(WIDTH))


@pytest.fixture
def stub() -> Iterator[StubServer]:
    with running_stub() as server:
        yield server


def _add_job(stub: StubServer, job_id: str, name: str, reason: str = "") -> None:
    stub.stub.jobs[job_id] = {**make_job(job_id, "FAILED", reason=reason), "name": name}


def _stdout(stub: StubServer, *args: str) -> str:
    result = invoke(stub, *args)
    assert result.exit_code == 0, result.output
    return str(result.stdout)


def _fits(text: str) -> list[str]:
    lines = text.splitlines()
    assert lines and all(len(line) <= WIDTH for line in lines), "\n".join(lines)
    return lines


def test_list_keeps_each_job_on_one_line_and_cuts_a_long_name(stub: StubServer) -> None:
    _add_job(stub, "training-aaaaaaaaaa", LONG_NAME, LONG_REASON)
    _add_job(stub, "training-bbbbbbbbbb", "mnist")
    lines = _fits(_stdout(stub, "list"))
    assert len(lines) == 3, lines  # the header and one line a job
    long_row = next(line for line in lines if "training-aaaaaaaaaa" in line)
    cut_name = long_row.split()[1]
    assert cut_name.endswith("…") and LONG_NAME.startswith(cut_name[:-1]), long_row
    assert long_row.rstrip().endswith("…")  # the reason too
    assert "training-bbbbbbbbbb" in lines[1] + lines[2]  # ids are whole


@pytest.mark.parametrize("where", ["after", "before"])
def test_wide_shows_the_long_name_and_reason_whole(stub: StubServer, where: str) -> None:
    _add_job(stub, "training-aaaaaaaaaa", LONG_NAME, LONG_REASON)
    args = ("list", "--wide") if where == "after" else ("--wide", "list")
    lines = _stdout(stub, *args).splitlines()
    assert len(lines) == 2 and "…" not in lines[1], lines
    assert LONG_NAME in lines[1] and lines[1].rstrip().endswith(LONG_REASON)


def test_show_fits_80_columns_and_wide_shows_it_all(stub: StubServer) -> None:
    _add_job(stub, "training-aaaaaaaaaa", LONG_NAME, LONG_REASON)
    command = "python train.py " + " ".join(f"--option-{n} value-{n}" for n in range(10))
    stub.stub.jobs["training-aaaaaaaaaa"]["manifest"]["framework"]["command"] = command
    stub.stub.events["training-aaaaaaaaaa"] = [
        {
            "time": "2026-01-02T03:04:05Z",
            "kind": "state",
            "from_state": "RUNNING",
            "to_state": "FAILED",
            "reason": LONG_REASON,
            "detail": {},
        }
    ]
    lines = _fits(_stdout(stub, "show", "training-aaaaaaaaaa"))
    [command_line] = [line for line in lines if line.startswith("command")]
    assert command_line.rstrip().endswith("…") and command[:40] in command_line
    [event] = [line for line in lines if "FAILED" in line and line.startswith(" ")]
    assert event.rstrip().endswith("…"), lines

    whole = _stdout(stub, "show", "training-aaaaaaaaaa", "--wide")
    assert command in whole and LONG_REASON in whole and "…" not in whole


def test_cluster_shows_memory_in_units_and_json_in_bytes(stub: StubServer) -> None:
    memory = int(23.5 * 1024**3)
    stub.stub.cluster = {
        "backend": "kubernetes",
        "nodes": [
            {
                "name": "gpu-node-1",
                "cpus": 16,
                "memory_bytes": memory,
                "gpus": 4,
                "gpu_product": "NVIDIA-A100-SXM4-80GB",
                "pretend_gpus": False,
                "learners": 2,
                "cpus_used": 4,
                "memory_bytes_used": 8 * 1024**3,
                "gpus_used": 2,
            }
        ],
        "active_learners": 2,
        "used": {"learners": 2, "cpus": 4, "memory_bytes": 8 * 1024**3, "gpus": 2},
    }
    text = _stdout(stub, "cluster")
    lines = _fits(text)
    assert str(memory) not in text and str(8 * 1024**3) not in text, text
    assert any("8.0 GiB/23.5 GiB" in line for line in lines), lines
    assert "used: learners=2, cpus=4, memory=8.0 GiB, gpus=2" in lines, lines
    assert json.loads(_stdout(stub, "cluster", "-o", "json")) == stub.stub.cluster


def test_data_list_cuts_a_long_path_but_not_its_size(stub: StubServer) -> None:
    deep = "/".join(f"level-{n:02d}" for n in range(12)) + "/shard-0001.npz"
    stub.stub.data["digits"] = {deep: b"x" * (3 << 20), "labels.txt": b"123456"}
    lines = _fits(_stdout(stub, "data", "list", "digits"))
    assert len(lines) == 3, lines  # labels.txt, then the deep path
    assert lines[1].rstrip().endswith("6 B") and "…" not in lines[1]
    assert lines[2].rstrip().endswith("3.0 MiB") and "…" in lines[2]
    assert deep in _stdout(stub, "data", "list", "digits", "--wide")


@pytest.mark.parametrize(
    ("size", "shown"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (3 << 20, "3.0 MiB"),
        (int(23.5 * 1024**3), "23.5 GiB"),
        (3 * 1024**4, "3.0 TiB"),
        (-(5 << 30), "-5.0 GiB"),  # over a quota: as many units as under it
        (None, "-"),
        (True, "-"),
    ],
)
def test_sizes_read_in_binary_units(size: object, shown: str) -> None:
    assert format_size(size) == shown


def test_a_field_holding_bytes_or_seconds_is_shown_in_units() -> None:
    assert format_field("memory_bytes", 1 << 30) == ("memory", "1.0 GiB")
    assert format_field("memory_bytes_used", None) == ("memory_used", "-")
    assert format_field("elapsed_s", 754) == ("elapsed", "12m 34s")
    assert format_field("wait_seconds", 0.0125) == ("wait", "12.5 ms")
    assert format_field("gpus", 4) is None and format_field("name", "node-a") is None
    assert format_field("memory_bytes", "lots") is None
