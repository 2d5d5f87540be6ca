"""A job's own network on a node: a network namespace with nothing but its loopback.

The learners of a job on one node reach each other on 127.0.0.1 (torch's TCPStore at
MASTER_ADDR:MASTER_PORT, gloo); in the node's own network namespace so could every other
job's program, and set keys in that store. The node agent makes a namespace per job
attempt (`make`), kept by a bind mount of its handle at a path of the agent's, which each
of the job's programs joins in its pre-exec hook (`learner_image.program_sandbox`), and
removes it with the attempt's last learner (`remove`). What the runner and the sidecars do
on the network is not in it: they stay in the node's.

With no resolver reachable, a name lookup that the node's hosts file does not answer fails
("temporary failure"): torch's store looks up the name of each peer's address, which a dual
stack socket sees as ::ffff:127.0.0.1, and warns on every connection. `loopback_hosts` is
the node's hosts file with the loopback addresses named, which the program's namespace
shows as /etc/hosts.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
import sys
from pathlib import Path

CLONE_NEWNET = 0x40000000
MS_BIND = 0x1000
MNT_DETACH = 0x2
# Run in the new namespace, before anything else: the loopback up, then wait to be let go.
_HOLDER = """
import fcntl, socket, struct, sys
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    request = struct.pack("16sH14x", b"lo", 0)
    flags = struct.unpack("16sH14x", fcntl.ioctl(s.fileno(), 0x8913, request))[1]
    fcntl.ioctl(s.fileno(), 0x8914, struct.pack("16sH14x", b"lo", flags | 0x1))
print("up", flush=True)
sys.stdin.read()
"""


LOOPBACK_NAMES = (("::1", "localhost"), ("::ffff:127.0.0.1", "localhost"))
HOSTS = Path("/etc/hosts")


def loopback_hosts(text: str) -> str:
    """`text` (a hosts file) with a line for each loopback address it does not name."""
    fields = [line.split() for line in text.splitlines()]
    named = {words[0] for words in fields if words and not words[0].startswith("#")}
    missing = [f"{address} {name}" for address, name in LOOPBACK_NAMES if address not in named]
    if not missing:
        return text
    return text + ("" if text.endswith("\n") or not text else "\n") + "\n".join(missing) + "\n"


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p]
    libc.mount.argtypes += [ctypes.c_ulong, ctypes.c_char_p]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    return libc


def make(path: Path) -> None:
    """A new network namespace with its loopback up, held at `path` (OSError if the node
    refuses one)."""
    libc = _libc()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.touch(mode=0o600)

    def enter_new_namespace() -> None:
        if libc.unshare(CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")

    try:
        holder = subprocess.Popen(
            [sys.executable, "-I", "-c", _HOLDER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            preexec_fn=enter_new_namespace,
        )
    except subprocess.SubprocessError as error:  # the hook failed: the kernel said no
        path.unlink(missing_ok=True)
        raise OSError(f"no network namespace for {path.name}: {error}") from error
    try:
        assert holder.stdout is not None and holder.stdin is not None
        if holder.stdout.readline() != b"up\n":
            raise OSError(f"the namespace of {path.name} got no loopback")
        handle = f"/proc/{holder.pid}/ns/net".encode()
        if libc.mount(handle, str(path).encode(), None, MS_BIND, None) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"mount {handle.decode()} on {path}: {os.strerror(errno)}")
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    finally:
        holder.kill()
        holder.wait()


def remove(path: Path) -> None:
    """Let go of the namespace held at `path` (it ends once no program is in it)."""
    with contextlib.suppress(OSError):
        _libc().umount2(str(path).encode(), MNT_DETACH)
    path.unlink(missing_ok=True)


def join(libc: ctypes.CDLL, path: Path) -> None:
    """Move the calling process into the namespace held at `path` (in a pre-exec hook)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns {path}: {os.strerror(errno)}")
    finally:
        os.close(fd)
