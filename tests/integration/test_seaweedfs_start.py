"""The test setup's S3 server starts even when a port it chose is taken before it binds."""

import socket
from pathlib import Path

import pytest

from tests import services


def test_seaweedfs_chooses_again_when_a_chosen_port_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    real_free_ports = services.free_ports
    choices: list[list[int]] = []

    def first_choice_taken(count: int) -> list[int]:
        ports = real_free_ports(count)
        if not choices:
            ports[-3] = taken.getsockname()[1]  # webdav.port, as seen in a CI run
        choices.append(ports)
        return ports

    monkeypatch.setattr(services, "free_ports", first_choice_taken)
    try:
        server = services.start_seaweedfs(tmp_path)
    finally:
        taken.close()
    try:
        assert len(choices) == 2
        assert "Port allocation failed" in (tmp_path / "seaweedfs.log").read_text()
        assert services.port_is_open(int(server.endpoint_url.rsplit(":", 1)[1]))
    finally:
        server.stop()
