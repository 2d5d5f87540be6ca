"""A port for learners to meet at (torch's TCPStore at MASTER_PORT, a parameter server's).

It is chosen below the kernel's ephemeral range. A learner that keeps trying to connect to a
local port of that range before its server listens is in time handed that very port as its
own source port and connects to itself; the server then cannot listen (EADDRINUSE), as
torch's rendezvous did when its learners were slow to start.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_PORTS = Path("/proc/sys/net/ipv4/ip_local_port_range")
LINUX_LOWEST_EPHEMERAL = 32768


def lowest_ephemeral_port() -> int:
    try:
        return int(EPHEMERAL_PORTS.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return LINUX_LOWEST_EPHEMERAL


def free_rendezvous_port(host: str = "127.0.0.1") -> int:
    """A port below the ephemeral range that nothing on `host` holds right now."""
    lowest = lowest_ephemeral_port()
    while True:
        port = random.randrange(lowest // 2, lowest)
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
