"""A parameter-server sidecar takes greetings of its own job's sidecars only: a sidecar of
another job, or anyone who knows the job's id but not its token, is hung up on."""

from __future__ import annotations

import socket
import threading
import time

from learner_image.ps.transport import LEFT, Header, Inbox, Listener, announce, job_tag


def test_a_sidecar_takes_greetings_of_its_own_job_only() -> None:
    heard: list[int] = []
    got = threading.Event()

    def lost(_inbox: Inbox, kind: int) -> None:
        heard.append(kind)
        got.set()

    def unused(*_: object) -> memoryview:
        raise AssertionError("a greeting carries no payload")

    listener = Listener(
        ("127.0.0.1", 0), {1: Inbox(1)}, unused, unused, lost, tag=job_tag("training-a", "token-a")
    )
    listener.start()
    try:
        # Another job's sidecar greets with rank 1, as a peer would, and so does one that
        # keys its greeting with the job's id alone: refused, hung up on.
        for tag in (job_tag("training-b", "token-b"), job_tag("training-a", "")):
            with socket.create_connection(listener.address, timeout=10) as sock:
                sock.sendall(Header(LEFT, 1, tag).pack())
                assert sock.recv(1) == b""
        assert not heard
        deadline = time.monotonic() + 10
        assert announce(
            LEFT, 1, 0, lambda: listener.address, deadline, job_tag("training-a", "token-a")
        )
        assert got.wait(10)
        assert heard == [LEFT]
    finally:
        listener.close()
    assert job_tag("training-a", "token-a") != job_tag("training-b", "token-a")
