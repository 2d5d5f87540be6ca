"""Upload a learner's RESULT_DIR to the object store, keeping relative paths.

Learner 1's results go to `jobs/{job}/results/`, another learner's (when it wrote any) to
`jobs/{job}/results/learner-{n}/`. Symbolic links are followed only when they point inside
RESULT_DIR; everything else that is not a regular file is skipped.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storage.object_store import ObjectStore

UPLOAD_WORKERS = 4


def results_prefix(job_id: str, learner: int) -> str:
    base = f"jobs/{job_id}/results/"
    return base if learner == 1 else f"{base}learner-{learner}/"


def result_files(root: Path) -> list[str]:
    """Relative `/`-separated paths of the files to upload from `root`, sorted."""
    if not root.is_dir():
        return []
    real_root = os.path.realpath(root)
    files: list[str] = []
    for dirpath, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(names):
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                target = os.path.realpath(full)
                if os.path.commonpath([real_root, target]) != real_root:
                    continue
            if not os.path.isfile(full):
                continue
            files.append(os.path.relpath(full, root).replace(os.sep, "/"))
    return files


def upload_results(store: ObjectStore, root: Path, prefix: str) -> int:
    """Upload every file under `root` to `prefix`; returns the number uploaded."""
    files = result_files(root)
    if not files:
        return 0
    with ThreadPoolExecutor(max_workers=min(UPLOAD_WORKERS, len(files))) as pool:
        for _ in pool.map(lambda rel: store.put_file(prefix + rel, root / rel), files):
            pass
    return len(files)
