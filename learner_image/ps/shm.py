"""Shared-memory primitives: mapped files, 64-bit words, process-shared semaphores, flocks.

Every word in the region has exactly one writer, so no word needs an atomic
read-modify-write: an aligned 8-byte store or load is atomic on the 64-bit machines dlaas
runs on. Ordering between the data a process writes (a gradient, the weights) and the word
that publishes it comes from the semaphore post that follows the store and the wait that
precedes the load: glibc's `sem_post`/`sem_wait` are full barriers (a locked instruction on
x86-64, release/acquire on arm64).

Semaphores are POSIX `sem_t` placed in the mapped file (`sem_init(pshared=1)`), initialised
once by whoever creates the file and never again: a process may be blocked on one while a
restarted server maps the file anew. A semaphore only says "look again": every waiter
re-reads the words it waits on, so a stale or extra post costs one scan, never a wrong step.

Liveness comes from `flock`: a learner holds its slot's lock file and the server holds
`server.lock` for as long as they live; the kernel drops the lock when the process dies,
however it dies, so probing the lock tells a dead peer from a slow one exactly, across
containers that share the directory.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import time
from pathlib import Path

import numpy as np

PAGE = 4096
SEM_BYTES = 32  # sizeof(sem_t) on 64-bit Linux
CLOCK_MONOTONIC = 1

_libc = ctypes.CDLL(None, use_errno=True)
for _name in ("sem_init", "sem_post", "sem_wait", "sem_trywait", "sem_getvalue"):
    getattr(_libc, _name).argtypes = [ctypes.c_void_p] + (
        [ctypes.c_int, ctypes.c_uint] if _name == "sem_init" else []
    )
_libc.sem_getvalue.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_libc.sem_clockwait.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(_Timespec)]


def round_up(value: int, multiple: int = PAGE) -> int:
    return (value + multiple - 1) // multiple * multiple


def open_region_file(path: Path, flags: int) -> int:
    """Open a file of a region, never through a link (the region's directory may be the
    program's, and the server root's). A file a root server creates in a directory of
    another uid's becomes that uid's, so that the program it was made for can open it."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    if flags & os.O_CREAT and os.geteuid() == 0:
        try:
            owner = os.stat(path.parent)
            if owner.st_uid != 0:
                os.fchown(fd, owner.st_uid, owner.st_gid)
        except OSError:
            os.close(fd)
            raise
    return fd


def map_file(path: Path, size: int | None = None) -> mmap.mmap:
    """Map a whole file read-write (creating and sizing it when `size` is given)."""
    flags = os.O_RDWR | (os.O_CREAT if size is not None else 0)
    fd = open_region_file(path, flags)
    try:
        if size is not None:
            os.ftruncate(fd, size)
        return mmap.mmap(fd, 0 if size is None else size)
    finally:
        os.close(fd)


def address(buffer: mmap.mmap, offset: int) -> int:
    """The address of `buffer[offset]` (the mapping stays exported while the process runs)."""
    return ctypes.addressof(ctypes.c_char.from_buffer(buffer, offset))


def words(buffer: mmap.mmap, offset: int, count: int) -> np.ndarray:
    """`count` native uint64 words at `offset` (8-byte aligned)."""
    if offset % 8:
        raise ValueError(f"word offset {offset} is not 8-byte aligned")
    return np.frombuffer(buffer, dtype=np.uint64, count=count, offset=offset)


class Semaphore:
    """A process-shared POSIX semaphore living at a fixed place in a mapped file."""

    def __init__(self, buffer: mmap.mmap, offset: int) -> None:
        self._address = ctypes.c_void_p(address(buffer, offset))

    def initialise(self) -> None:
        if _libc.sem_init(self._address, 1, 0) != 0:
            raise OSError(ctypes.get_errno(), "sem_init failed")

    def post(self) -> None:
        _libc.sem_post(self._address)

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for a post; True if one was taken."""
        deadline = time.clock_gettime(CLOCK_MONOTONIC) + max(timeout, 0.0)
        spec = _Timespec(int(deadline), int((deadline % 1.0) * 1e9))
        while True:
            if _libc.sem_clockwait(self._address, CLOCK_MONOTONIC, ctypes.byref(spec)) == 0:
                return True
            error = ctypes.get_errno()
            if error == errno.ETIMEDOUT:
                return False
            if error != errno.EINTR:
                raise OSError(error, "sem_clockwait failed")

    def drain(self) -> int:
        """Take every pending post without blocking; how many there were."""
        taken = 0
        while _libc.sem_trywait(self._address) == 0:
            taken += 1
        return taken


class FileLock:
    """An exclusive `flock` on a file, held while the process lives (or until released)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        fd = open_region_file(self.path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def acquire(self, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not self.try_acquire():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: {self.path} is still locked after {timeout:.0f} s")
            time.sleep(0.01)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor drops the flock
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None


def is_locked(path: Path) -> bool:
    """Whether some live process holds an exclusive flock on `path` (probe, then let go).

    The probe takes a shared lock: probes do not exclude one another, so a probe racing
    another on a free lock never takes it for held (an exclusive probe would)."""
    try:
        fd = open_region_file(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
