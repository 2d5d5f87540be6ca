"""`dlaas plan MANIFEST` against the real API served over a socket, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

from storage.calibration import Calibration
from tests.integration.api_harness import ADMIN_TOKEN, CliOnApi, calibration_job

MANIFEST = """\
name: digits
learners: 2
framework:
  name: pytorch
  command: python train.py
elastic:
  min_learners: 1
  max_learners: 4
  min_batch_size: 64
  max_batch_size: 512
  max_learner_batch_size: 256
performance:
  sample_seconds: 0.002
  step_overhead_seconds: 0.01
  model_bytes: 50000000
  samples: 6000000
"""


def _manifest(tmp_path: Path, text: str = MANIFEST) -> Path:
    path = tmp_path / "manifest.yml"
    path.write_text(text)
    return path


async def test_the_table_marks_the_recommendation_and_json_is_the_apis(
    cli: CliOnApi, tmp_path: Path
) -> None:
    manifest = _manifest(tmp_path)
    answer = await cli.api.admin.post(
        "/v2/plan", content=MANIFEST, headers={"content-type": "application/yaml"}
    )
    assert answer.status_code == 200, answer.text

    as_json = await cli.dlaas(ADMIN_TOKEN, "plan", str(manifest), "--output", "json")
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout) == answer.json()

    shown = await cli.dlaas(ADMIN_TOKEN, "plan", str(manifest))
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert lines[0].split() == [
        "LEARNERS",
        "GLOBAL",
        "BATCH",
        "LEARNER",
        "BATCH",
        "STEP",
        "SAMPLES/S",
        "TIME",
        "TO",
        "FINISH",
        "EFFICIENCY",
    ]
    candidates = answer.json()["candidates"]
    rows = lines[1 : 1 + len(candidates)]
    (pick,) = [c for c in candidates if c["recommended"]]
    (marked,) = [row for row in rows if row.lstrip().startswith("*")]
    assert marked.split()[1:4] == [
        str(pick["learners"]),
        str(pick["global_batch"]),
        str(int(pick["learner_batch"])),
    ]
    # one learner at 64: 0.01 + 0.002 * 64 = 138 ms a step, alone: 100% efficient
    first = rows[0].split()
    assert first[:3] == ["1", "64", "64"]
    assert first[3:5] == ["138", "ms"] and first[-1] == "100%"
    assert f"{round(64 / 0.138)}" in first
    learners = pick["learners"]
    assert lines[-1].startswith(
        f"recommended: {learners} learner{'s' if learners > 1 else ''} at a global batch of "
        f"{pick['global_batch']} ({int(pick['learner_batch'])} a learner): "
    )
    assert "to finish" in lines[-1] and "scaling efficiency" in lines[-1]
    assert "all-reduce over links of 1.25 GB/s and 50 us latency" in shown.stderr


async def test_without_samples_the_time_to_finish_is_a_dash(cli: CliOnApi, tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, MANIFEST.replace("  samples: 6000000\n", ""))
    shown = await cli.dlaas(ADMIN_TOKEN, "plan", str(manifest))
    assert shown.exit_code == 0, shown.output
    assert "no performance.samples: ranked by throughput" in shown.stderr
    assert "to finish" not in shown.stdout.splitlines()[-1]
    assert all(row.split()[-2] == "-" for row in shown.stdout.splitlines()[1:-1])


async def test_a_refused_manifest_names_the_field_and_the_fix(
    cli: CliOnApi, tmp_path: Path
) -> None:
    no_performance = MANIFEST.split("performance:")[0]
    manifest = _manifest(tmp_path, no_performance)
    refused = await cli.dlaas(ADMIN_TOKEN, "plan", str(manifest))
    assert refused.exit_code == 1
    assert refused.stdout == "" and "Traceback" not in refused.output
    assert "manifest.yml: invalid manifest: performance: missing" in refused.stderr
    assert "sample_seconds: 0.002" in refused.stderr

    no_batch = no_performance.split("elastic:")[0] + "performance: {sample_seconds: 0.01}\n"
    refused = await cli.dlaas(ADMIN_TOKEN, "plan", str(_manifest(tmp_path, no_batch)))
    assert refused.exit_code == 1 and "performance.batch_size: missing" in refused.stderr


async def test_a_missing_file_or_token_is_said_plainly(cli: CliOnApi, tmp_path: Path) -> None:
    missing = await cli.dlaas(ADMIN_TOKEN, "plan", str(tmp_path / "nope.yml"))
    assert missing.exit_code == 1 and "Traceback" not in missing.output
    assert f"MANIFEST {tmp_path / 'nope.yml'}: no such file" in missing.stderr
    directory = await cli.dlaas(ADMIN_TOKEN, "plan", str(tmp_path))
    assert directory.exit_code == 1 and "is not a file" in directory.stderr

    anonymous = await cli.dlaas(None, "plan", str(_manifest(tmp_path)))
    assert anonymous.exit_code == 1
    assert "authentication failed" in anonymous.stderr


async def test_a_calibration_gives_the_link_and_the_seconds_a_sample(
    cli: CliOnApi, tmp_path: Path
) -> None:
    measured = Calibration(2e10, 2, 3e8, 2e-4, "2.13.0")
    job_id = await calibration_job(cli.api, cli.api.admin, measured.to_json().encode())
    flops = MANIFEST.replace("sample_seconds: 0.002", "flops_per_sample: 4.0e+7")
    manifest = _manifest(tmp_path, flops)
    answer = await cli.api.admin.post(
        "/v2/plan",
        params={"calibration": job_id},
        content=flops,
        headers={"content-type": "application/yaml"},
    )
    assert answer.status_code == 200, answer.text

    as_json = await cli.dlaas(
        ADMIN_TOKEN, "plan", str(manifest), "--calibration", job_id, "--output", "json"
    )
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout) == answer.json()

    shown = await cli.dlaas(ADMIN_TOKEN, "plan", str(manifest), "--calibration", job_id)
    assert shown.exit_code == 0, shown.output
    assert (
        f"all-reduce over links of 300 MB/s and 200 us latency (measured by calibration "
        f"{job_id})" in shown.stderr
    )
    # 4e7 FLOPs at 2e10 FLOP/s
    assert f"2 ms a sample: 4e+07 FLOPs at 20 GFLOP/s (measured by calibration {job_id})" in (
        shown.stderr
    )
    # one learner at 64: 0.01 + 0.002 * 64 = 138 ms a step, as with sample_seconds: 0.002
    assert shown.stdout.splitlines()[1].split()[3:5] == ["138", "ms"]

    refused = await cli.dlaas(ADMIN_TOKEN, "plan", str(manifest), "--calibration", "nosuch-job")
    assert refused.exit_code == 1 and "Traceback" not in refused.output
    assert "--calibration nosuch-job: no job 'nosuch-job' among your teams' jobs" in (
        refused.stderr
    )
    needed = await cli.dlaas(ADMIN_TOKEN, "plan", str(manifest))
    assert needed.exit_code == 1
    assert "manifest.yml: calibration: missing; performance.flops_per_sample" in needed.stderr
