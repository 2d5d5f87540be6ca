"""A manifest key nothing reads: the job is accepted, `POST /v2/jobs` answers with a warning
naming it, and `dlaas train` prints that warning on stderr. Against the real API."""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.api_harness import ADMIN_TOKEN, MANIFEST, CliOnApi, submit

TYPO = MANIFEST + b"restart_polcy:\n  max_restarts: 2\n"
WARNING = "restart_polcy is not a manifest field: did you mean restart_policy?"


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
    assert first.json()["manifest"]["restart_polcy"] == {"max_restarts": 2}
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
