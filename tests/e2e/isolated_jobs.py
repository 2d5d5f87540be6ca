"""What the tests of per-uid isolation on the embedded platform share: they run only as
root, and their jobs use the system's Python."""

from __future__ import annotations

import os

import pytest

ROOT_ONLY = pytest.mark.skipif(
    os.geteuid() != 0,
    reason="programs get uids of their own only when the node agent runs as root; "
    "run the tests as root (CI does)",
)
# The jobs need only the standard library: the system's Python, which every uid may run
# (this machine's own interpreter may sit under root's 0700 home).
SYSTEM_PYTHON = "/usr/bin/python3"
