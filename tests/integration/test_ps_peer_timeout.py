"""Sync mode across sidecars waits for a silent peer only as long as `--peer-timeout`, then
fails naming it."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from learner_image.ps.client import ParameterServer
from learner_image.ps.layout import SGD, ModelLayout
from learner_image.ps.transport import PeerTimeout
from tests.integration import ps_harness
from tests.integration.ps_harness import ThreadServer, sidecar_args

base = ps_harness.base

NUMEL = 1024
LAYOUT = ModelLayout.of([("w", (NUMEL,))])


def test_a_sync_round_fails_naming_the_peer_that_did_not_answer(base: Path) -> None:
    servers = [
        ThreadServer(sidecar_args(base, rank, 2, ["sync"], ["--peer-timeout", "1"]))
        for rank in range(2)
    ]
    clients = [ParameterServer(base / f"region-{rank}", 0, timeout=30) for rank in range(2)]
    attaching = [
        threading.Thread(
            target=c.attach, args=(LAYOUT, SGD(), np.zeros(NUMEL, np.float32)), daemon=True
        )
        for c in clients
    ]
    for thread in attaching:
        thread.start()
    for thread in attaching:
        thread.join(30)
    try:
        clients[0].commit()  # rank 1's learner never steps: rank 1 sends no part
        servers[0].thread.join(30)
        assert not servers[0].thread.is_alive(), "rank 0 waited for its peer without end"
        with pytest.raises(PeerTimeout, match=r"peer sidecar rank 1 at 127\.0\.0\.1:\d+ did not"):
            servers[0].stop()
    finally:
        for client in clients:
            client.close()
        servers[1].stop()
