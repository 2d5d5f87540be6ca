"""Pack a model directory into a zip archive on disk, one file at a time."""

from __future__ import annotations

import os
import tempfile
import zipfile
from pathlib import Path

SKIPPED_DIRS = frozenset({"__pycache__", ".git", ".hg", ".svn", ".mypy_cache", ".pytest_cache"})
SKIPPED_SUFFIXES = (".pyc", ".pyo")


def iter_model_files(root: Path) -> list[tuple[Path, str]]:
    """`(path, archive name)` for every regular file under `root`, sorted, skipping caches
    and version-control directories. Symlinked directories are not followed."""
    found: list[tuple[Path, str]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
        base = Path(dirpath)
        for name in sorted(filenames):
            if name.endswith(SKIPPED_SUFFIXES):
                continue
            path = base / name
            if path.is_file():
                found.append((path, path.relative_to(root).as_posix()))
    return found


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
