"""Sync mode across sidecars waits for a silent peer only as long as `--peer-timeout`, then
fails naming it."""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from learner_image.ps.client import ParameterServer
from learner_image.ps.layout import SGD, ModelLayout
from learner_image.ps.transport import PeerTimeout
from tests.integration.ps_harness import ThreadServer

NUMEL = 1024
LAYOUT = ModelLayout.of([("w", (NUMEL,))])


@pytest.fixture
def base() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="dlaas-ps-timeout-", dir="/dev/shm"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def test_a_sync_round_fails_naming_the_peer_that_did_not_answer(base: Path) -> None:
    servers = [
        ThreadServer(
            [
                "--dir",
                str(base / f"region-{rank}"),
                "--slots",
                "1",
                "--mode",
                "sync",
                "--rank",
                str(rank),
                "--world",
                "2",
                "--peers-dir",
                str(base / "peers"),
                "--listen",
                "127.0.0.1:0",
                "--threads",
                "1",
                "--snapshot-interval",
                "0",
                "--peer-timeout",
                "1",
            ]
        )
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
