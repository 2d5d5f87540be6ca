"""Pack a model directory into a zip archive on disk, one file at a time."""

from __future__ import annotations

import os
import tempfile
import zipfile
from pathlib import Path

SKIPPED_DIRS = frozenset({"__pycache__", ".git", ".hg", ".svn", ".mypy_cache", ".pytest_cache"})
SKIPPED_SUFFIXES = (".pyc", ".pyo")


class LinkLeavesFolder(Exception):
    """A symbolic link in the model directory points outside it: its target is not the
    user's code to upload (a link to /etc/passwd would be sent as a file)."""

    def __init__(self, link: Path, target: str) -> None:
        super().__init__(
            f"{link} is a symbolic link to {target}, outside the model directory: "
            "copy what it points to into the directory, or remove the link"
        )
        self.link = link
        self.target = target


def iter_model_files(root: Path) -> list[tuple[Path, str]]:
    """`(path, archive name)` for every regular file under `root`, sorted, skipping caches
    and version-control directories.

    A link to a file inside `root` is uploaded as that file; a link to a directory inside it
    is not followed (its files are uploaded where they are). A link, to a file or to a
    directory, that leads out of `root` raises `LinkLeavesFolder`.
    """
    real_root = os.path.realpath(root)
    found: list[tuple[Path, str]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
        base = Path(dirpath)
        for name in dirnames:
            _check_link(base / name, real_root)
        for name in sorted(filenames):
            if name.endswith(SKIPPED_SUFFIXES):
                continue
            path = base / name
            _check_link(path, real_root)
            if path.is_file():
                found.append((path, path.relative_to(root).as_posix()))
    return found


def _check_link(path: Path, real_root: str) -> None:
    if not path.is_symlink():
        return
    target = os.path.realpath(path)
    if os.path.commonpath([real_root, target]) != real_root:
        raise LinkLeavesFolder(path, os.readlink(path))


def zip_directory(root: Path, dest_dir: Path | None = None) -> Path:
    """Write `root`'s files into a new temporary `.zip` and return its path.

    Files are streamed into the archive (never read whole into memory). The caller deletes
    the archive when done.
    """
    fd, name = tempfile.mkstemp(prefix="dlaas-model-", suffix=".zip", dir=dest_dir)
    os.close(fd)
    archive = Path(name)
    try:
        with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for path, arcname in iter_model_files(root):
                zf.write(path, arcname)
    except BaseException:
        archive.unlink(missing_ok=True)
        raise
    return archive
