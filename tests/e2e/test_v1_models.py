"""A model submitted through FfDL's /v1 API runs to completion on the embedded platform,
and its status, log, metrics and trained model come back in FfDL's shapes."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Platform
from tests.ffdl_v1.spec import check

pytestmark = pytest.mark.e2e

JOB = Path(__file__).with_name("v1_job")
MANIFEST = b"""\
name: v1-e2e
description: a model trained through FfDL's v1 API
version: "1.0"
learners: 1
gpus: 0
cpus: 0.5
memory: 512Mi
framework:
  name: python
  version: "3"
  command: python train.py
evaluation_metrics:
  type: regex_extractor
  in: "$LOG_DIR"
  groups:
    training:
      regex: 'step (?P<step>\\d+) loss (?P<loss>[0-9.]+)'
      meta:
        step: step
      scalars:
        loss: loss
"""


def _model_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.write(JOB / "train.py", "train.py")
    return buffer.getvalue()


def test_a_v1_model_trains_to_completion(platform: Platform) -> None:
    headers = {"Authorization": f"Bearer {platform.token}"}
    with httpx.Client(base_url=platform.url, headers=headers, timeout=30) as ffdl:
        created = ffdl.post(
            "/v1/models",
            params={"version": "2017-02-13"},
            files={
                "manifest": ("manifest.yml", MANIFEST),
                "model_definition": ("model.zip", _model_zip()),
            },
        )
        assert created.status_code == 201, created.text
        model_id = created.json()["model_id"]

        done = platform.wait_for(
            model_id, "COMPLETED", lambda s: s["job"]["state"] in ("COMPLETED", "FAILED"), 120
        )
        assert done["job"]["state"] == "COMPLETED", platform.dlaas("logs", model_id).stdout

        model = ffdl.get(f"/v1/models/{model_id}").json()
        check("Model", model)
        assert model["training"]["training_status"]["status"] == "COMPLETED"
        assert "step 3 loss 0.3333" in ffdl.get(f"/v1/models/{model_id}/logs").text
        emetrics = ffdl.get(f"/v1/logs/{model_id}/emetrics", params={"pos": -1}).json()
        check("v1EMetricsList", emetrics)
        [last] = emetrics["models"]
        assert last["etimes"]["iteration"]["value"] == "3"
        trained = ffdl.get(f"/v1/models/{model_id}/trained_model")
        assert trained.status_code == 200
        with zipfile.ZipFile(io.BytesIO(trained.content)) as archive:
            assert archive.read("model.txt") == b"trained by a /v1 submission\n"

    shown = platform.dlaas("show", model_id)
    assert shown.returncode == 0 and model_id in shown.stdout
