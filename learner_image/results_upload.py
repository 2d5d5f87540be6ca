"""Upload a learner's RESULT_DIR to the object store, keeping relative paths.

Learner 1's results go to `jobs/{job}/results/`, another learner's (when it wrote any) to
`jobs/{job}/results/learner-{n}/` (once: a program that wrote them into a `learner-{n}/` folder
of its own gets no second one). Symbolic links are followed only when they point inside
RESULT_DIR; everything else that is not a regular file is skipped. Each file is opened
through no link at any step (`open_inside`) and what was opened is uploaded: a file the
program swaps for a link meanwhile (to one of the uploader's own, such as its
`/proc/self/environ`) fails the upload instead of being stored.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from learner_image.checkpoint_sync import open_inside

if TYPE_CHECKING:
    from storage.object_store import ObjectStore

UPLOAD_WORKERS = 4


def results_prefix(job_id: str, learner: int, files: Sequence[str] = ()) -> str:
    """Where learner `learner`'s `files` (RESULT_DIR's, relative) are stored.

    A program that already keeps its results in a folder of its learner's name (FfDL's
    learners shared one RESULT_DIR, so theirs wrote `$RESULT_DIR/learner-$LEARNER_ID/`) is
    not given a second one: its `learner-2/model.pt` is stored as `learner-2/model.pt`, not
    `learner-2/learner-2/model.pt`.
    """
    base = f"jobs/{job_id}/results/"
    own = f"learner-{learner}/"
    if learner == 1 or (files and all(path.startswith(own) for path in files)):
        return base
    return base + own


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
        for _ in pool.map(lambda rel: upload_one(store, root, rel, prefix + rel), files):
            pass
    return len(files)


def upload_one(store: ObjectStore, root: Path, rel: str, key: str) -> None:
    """Upload the file `rel` under `root` (or, for a link inside `root`, its target)."""
    real_root = os.path.realpath(root)
    source = os.path.relpath(os.path.realpath(root / rel), real_root).replace(os.sep, "/")
    if source.startswith("../"):
        raise FileNotFoundError(f"{rel} leads out of {root}")
    with open_inside(root, source) as opened:
        # The open file itself, not its name: the same file on a retry, whatever the
        # program renames meanwhile.
        store.put_file(key, Path(f"/dev/fd/{opened.fileno()}"))
