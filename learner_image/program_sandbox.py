"""What a program with a uid of its own sees of the node: its own temporary directory, and
where the node allows it, a mount namespace of its own.

Every program gets a private temporary directory (`TMPDIR`, in its learner's directory, the
program's alone). Where the runner is root and the kernel lets it make a mount namespace
(`probe`), the program starts in one, private to it (no mount propagates either way), in
which

- `/tmp` and `/var/tmp` are its temporary directory, and `/dev/shm` a fresh tmpfs, so
  nothing another job leaves there reaches it, nor anything it leaves there another job;
- the paths it must still reach under them (its learner's directory when the node keeps
  learners in /tmp, its parameter server's region on /dev/shm) are bound back in place;
- `/proc` is a procfs of its own mounted `hidepid=invisible`: the processes of other uids
  (other jobs' command lines, the platform's) are not there;
- System V IPC is a namespace of its own too;
- the network is its job's own where the node agent made one (`learner_image.job_network`):
  loopback alone, shared with the job's other learners and no other job's;
- what it must run that lies in a directory its uid cannot enter (dlaas's Python in a pyenv
  or a venv under root's 0700 home, say: `revealed`) is bound back read-only into an empty
  read-only directory that covers the closed one, so that the platform's home, its database
  and its tokens beside that Python stay out of sight.

`enter` is the pre-exec hook that sets this up in the forked child, then drops to the
program's uid. It runs after fork in a process that had threads: it only calls the C
library (through functions resolved beforehand) and `os`, never anything that takes a lock.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import stat
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from learner_image import job_network

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x2, 0x4, 0x8
MS_RDONLY, MS_REMOUNT = 0x1, 0x20
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000
PR_SET_PDEATHSIG = 1
# /tmp and /var/tmp become the program's temporary directory; /dev/shm a tmpfs of its own.
TEMPORARY_DIRS = (Path("/tmp"), Path("/var/tmp"))
SHM_DIR = Path("/dev/shm")
PROC_OPTIONS = b"hidepid=invisible"


@dataclass(frozen=True)
class Sandbox:
    """How to start a program: as `uid`, with `tmp_dir` its temporary directory; with
    `private_mounts`, in a mount namespace of its own where `keep` (paths under /tmp,
    /var/tmp or /dev/shm it must reach) are bound back in place."""

    uid: int
    tmp_dir: Path | None = None
    private_mounts: bool = False
    keep: tuple[Path, ...] = ()
    network: Path | None = None  # the job's network namespace to join (`job_network`)
    # (closed directory, path in it): covered, and the path bound back read-only (`revealed`)
    reveal: tuple[tuple[Path, Path], ...] = ()
    hosts: Path | None = None  # shown read-only as /etc/hosts (`job_network.loopback_hosts`)


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p]
    libc.mount.argtypes += [ctypes.c_ulong, ctypes.c_char_p]
    return libc


def covered(path: Path) -> bool:
    """Whether `path` lies in a directory the namespace covers with one of its own."""
    return any(root == path or root in path.parents for root in (*TEMPORARY_DIRS, SHM_DIR))


def kept_paths(paths: Iterable[Path]) -> tuple[Path, ...]:
    """Of `paths` the program must reach, those the namespace would hide, without any
    that lies inside another one kept (binding the outer one keeps it)."""
    hidden = sorted({p.resolve() for p in paths if covered(p.resolve())})
    return tuple(p for p in hidden if not any(q in p.parents for q in hidden))


def untraversable(path: Path) -> Path | None:
    """The nearest existing directory on the way to `path` that other users cannot enter."""
    for directory in reversed([path, *path.parents]):
        if not directory.exists():
            break
        if not directory.stat().st_mode & stat.S_IXOTH:
            return directory
    return None


def enterable_by_others(directories: Iterable[Path]) -> bool:
    """Whether users other than their owners can enter (or run) every one of `directories`."""
    return all(d.stat().st_mode & stat.S_IXOTH for d in directories)


def interpreter_paths() -> tuple[Path, ...]:
    """What a program started with dlaas's own interpreter must reach: the Python
    installation, the environment dlaas runs in, and the directory holding its packages."""
    prefixes = (sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix)
    packages = Path(__file__).resolve().parents[1]
    return tuple(sorted({Path(p).resolve() for p in prefixes} | {packages}))


def revealed(paths: Iterable[Path]) -> tuple[tuple[Path, Path], ...] | None:
    """For each of `paths` in a directory other uids cannot enter, (that directory, the
    path), without any path inside another. None when a path, or a directory between it
    and the closed one, is itself closed to them (a namespace cannot open it), or when the
    closed directory lies where the namespace covers with the program's own."""
    wanted = sorted(set(paths))
    pairs = []
    for path in wanted:
        if any(outer in path.parents for outer in wanted):
            continue
        closed = untraversable(path)
        if closed is None:
            continue
        below = [path, *path.parents[: len(path.parents) - len(closed.parents) - 1]]
        if closed == path or covered(closed) or not enterable_by_others(below):
            return None
        pairs.append((closed, path))
    return tuple(pairs)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(
    libc: ctypes.CDLL, source: str, target: str, kind: str | None, flags: int, data: bytes = b""
) -> None:
    result = libc.mount(
        source.encode(), target.encode(), kind.encode() if kind else None, flags, data or None
    )
    _check(result, f"mount {source} on {target}")


def _private_namespace(
    libc: ctypes.CDLL,
    tmp_dir: Path,
    keep: tuple[Path, ...],
    reveal: tuple[tuple[Path, Path], ...] = (),
    hosts: Path | None = None,
) -> None:
    """In the calling process: a mount and IPC namespace of its own, set up as the module
    says. Handles on what gets covered are taken (in the new namespace: a bind mount's
    source must be one of its own) before anything is covered, and bound back through
    them."""
    _check(libc.unshare(CLONE_NEWNS | CLONE_NEWIPC), "unshare")
    _mount(libc, "none", "/", None, MS_REC | MS_PRIVATE)
    tmp_fd = os.open(tmp_dir, os.O_PATH | os.O_DIRECTORY)
    kept = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY)) for path in keep]
    shown = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY)) for _closed, path in reveal]
    hosts_fd = os.open(hosts, os.O_PATH) if hosts is not None else None
    for directory in TEMPORARY_DIRS:
        if directory.is_dir():
            _mount(libc, f"/proc/self/fd/{tmp_fd}", str(directory), None, MS_BIND)
    if SHM_DIR.is_dir():
        _mount(libc, "tmpfs", str(SHM_DIR), "tmpfs", MS_NOSUID | MS_NODEV, b"mode=1777")
    previous = os.umask(0o066)  # what is made on the way is traversable, as on the node
    try:
        for path, fd in kept:
            os.makedirs(path, exist_ok=True)
            _mount(libc, f"/proc/self/fd/{fd}", str(path), None, MS_BIND | MS_REC)
        _reveal(libc, reveal, shown)
    finally:
        os.umask(previous)
    if hosts_fd is not None:
        _mount(libc, f"/proc/self/fd/{hosts_fd}", str(job_network.HOSTS), None, MS_BIND)
        flags = MS_BIND | MS_REMOUNT | MS_RDONLY
        _mount(libc, "none", str(job_network.HOSTS), None, flags)
    proc_flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
    _mount(libc, "proc", "/proc", "proc", proc_flags, PROC_OPTIONS)
    handles = (tmp_fd, *(fd for _path, fd in (*kept, *shown)), hosts_fd)
    for handle in handles:
        if handle is not None:
            os.close(handle)


def _reveal(
    libc: ctypes.CDLL, reveal: tuple[tuple[Path, Path], ...], shown: list[tuple[Path, int]]
) -> None:
    """Cover each closed directory with an empty tmpfs, bind the paths in it back read-only
    through their handles (the directories made on the way are traversable, not listable),
    then make the tmpfs read-only too."""
    tmpfs_flags = MS_NOSUID | MS_NODEV
    closed_dirs = list(dict.fromkeys(str(closed) for closed, _path in reveal))
    for closed in closed_dirs:
        _mount(libc, "tmpfs", closed, "tmpfs", tmpfs_flags, b"mode=0711")
    for path, fd in shown:
        os.makedirs(path, exist_ok=True)
        _mount(libc, f"/proc/self/fd/{fd}", str(path), None, MS_BIND | MS_REC)
        _mount(libc, "none", str(path), None, MS_BIND | MS_REMOUNT | MS_RDONLY)
    for closed in closed_dirs:
        flags = MS_REMOUNT | MS_RDONLY | tmpfs_flags
        _mount(libc, "tmpfs", closed, "tmpfs", flags, b"mode=0711")


def enter(sandbox: Sandbox) -> Callable[[], None]:
    """The pre-exec hook: the namespace (if asked), then the program's uid, then a parent
    death signal (which a change of uid would clear), so that the kernel SIGKILLs the
    program if the runner dies first."""
    libc = _libc()
    parent = os.getpid()
    uid = sandbox.uid

    def hook() -> None:
        if sandbox.network is not None:  # first: its handle may be under what gets covered
            job_network.join(libc, sandbox.network)
        if sandbox.private_mounts and sandbox.tmp_dir is not None:
            _private_namespace(libc, sandbox.tmp_dir, sandbox.keep, sandbox.reveal, sandbox.hosts)
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the runner died before the hook ran
            os._exit(1)

    return hook


def probe(reveal: tuple[tuple[Path, Path], ...] = ()) -> str | None:
    """Whether programs can get a namespace of their own on this node, with `reveal` bound
    back in it: None if so, else why not. Tried in a child process, which makes one as
    `enter` would and exits."""
    if os.geteuid() != 0:
        return "private /tmp, /dev/shm and /proc need the runner to be root"
    try:
        libc = _libc()
    except OSError as error:
        return f"no C library to make namespaces with: {error}"
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: try, say why not, exit
        os.close(read_end)
        message = b""
        try:
            tmp_dir = Path("/tmp") if Path("/tmp").is_dir() else Path("/")
            _private_namespace(libc, tmp_dir, (), reveal)
            _check(libc.unshare(job_network.CLONE_NEWNET), "unshare(CLONE_NEWNET)")
        except BaseException as error:
            message = str(error).encode()[:500] or type(error).__name__.encode()
        with contextlib.suppress(OSError):
            os.write(write_end, message)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as answer:
        message = answer.read()
    os.waitpid(pid, 0)
    if message:
        return f"the kernel refused a mount namespace of the program's own ({message.decode()})"
    return None
