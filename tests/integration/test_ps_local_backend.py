"""The local backend's node agent starts a `dlaas-ps` sidecar beside a learner whose job has
a parameter_server block, and removes its region when the learner is gone."""

from __future__ import annotations

import sys
from pathlib import Path

from learner_image.ps import sidecar
from lifecycle_manager.backends.base import LearnerPhase, LearnerSpec
from lifecycle_manager.backends.local.agent_learners import LearnerTable
from tests.integration.ps_harness import wait_for

# One SGD step through the sidecar, then the new weights are printed.
PUSH = """
import numpy as np
from learner_image.ps.client import ParameterServer
from learner_image.ps.layout import SGD, ModelLayout
c = ParameterServer(timeout=60)
c.attach(ModelLayout.of([("w", (16,))]), SGD(lr=0.5), np.ones(16, np.float32))
c.gradient[:] = 2.0
c.push()
print("weights", c.weights[0], "version", c.version, flush=True)
"""


def test_agent_runs_the_sidecar_beside_the_learner(tmp_path: Path) -> None:
    table = LearnerTable(tmp_path / "agent", lambda record: True, grace=5.0)
    spec = LearnerSpec(
        job_id="training-pslocal1",
        learner=1,
        attempt=0,
        num_learners=1,
        command=[sys.executable, "-c", PUSH],
        env={
            "DLAAS_PS_MODE": "sync",
            "TRAINING_ID": "training-pslocal1",
            "LEARNER_ID": "1",
            "NUM_LEARNERS": "1",
            "DLAAS_PS_SNAPSHOT_INTERVAL": "0",
        },
    )
    record, created = table.create(spec)
    assert created
    wait_for(lambda: record.finished, 90, "the learner to finish")
    output = (Path(record.workdir) / "runner.log").read_text()
    assert record.phase == LearnerPhase.SUCCEEDED.value, output
    assert "weights 0.0 version 1" in output  # 1 - 0.5 * 2
    assert "dlaas-ps" in (Path(record.workdir) / "ps.log").read_text()
    region = sidecar.region_directory("training-pslocal1", 1, 0)
    table.delete([record.name])
    wait_for(lambda: not region.exists(), 10, "the region to be removed")
