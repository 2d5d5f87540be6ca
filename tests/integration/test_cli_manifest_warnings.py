"""A manifest key nothing reads: the job is accepted, `POST /v2/jobs` answers with a warning
naming it, and `dlaas train` prints that warning on stderr; a key one typo away from a field
is refused with the field it meant. Against the real API."""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.api_harness import ADMIN_TOKEN, MANIFEST, CliOnApi, submit

TYPO = MANIFEST + b"remarks:\n  max_restarts: 2\n"
WARNING = "remarks is not a manifest field: it is kept, but nothing reads it"


async def test_submit_answers_with_a_warning_and_a_retry_gets_it_too(cli: CliOnApi) -> None:
    admin = cli.api.admin
    admin.headers["Idempotency-Key"] = "warn-0001"
    try:
        first = await submit(admin, TYPO)
        again = await submit(admin, TYPO)
    finally:
        del admin.headers["Idempotency-Key"]
    assert first.status_code == 201, first.text
    assert first.json()["warnings"] == [WARNING]
    assert first.json()["manifest"]["remarks"] == {"max_restarts": 2}
    assert again.json() == first.json()

    clean = await submit(admin)
    assert clean.status_code == 201, clean.text
    assert clean.json()["warnings"] == []


def _job_dir(tmp_path: Path, manifest: bytes) -> Path:
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "manifest.yml").write_bytes(manifest)
    (tmp_path / "job" / "train.py").write_text("print('hello')\n")
    return tmp_path / "job" / "manifest.yml"


async def test_train_prints_the_warning_on_stderr_and_submits(
    cli: CliOnApi, tmp_path: Path
) -> None:
    manifest = _job_dir(tmp_path, TYPO)
    result = await cli.dlaas(ADMIN_TOKEN, "train", str(manifest))
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().startswith("training-")
    assert f"warning: {manifest}: {WARNING}" in " ".join(result.stderr.split())

    as_json = await cli.dlaas(ADMIN_TOKEN, "--output", "json", "train", str(manifest))
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout)["warnings"] == [WARNING]
    assert WARNING in " ".join(as_json.stderr.split())


async def test_a_near_miss_of_a_field_is_refused_with_the_field_it_meant(cli: CliOnApi) -> None:
    for typo, meant in (
        (b"gpu: 4\n", "gpus"),
        (b"restart_polcy: {max_restarts: 2}\n", "restart_policy"),
    ):
        answer = await submit(cli.api.admin, MANIFEST + typo)
        assert answer.status_code == 422, answer.text
        body = answer.json()
        key = typo.split(b":")[0].decode()
        assert body["field"] == key
        assert f"did you mean {meant}?" in body["detail"]
