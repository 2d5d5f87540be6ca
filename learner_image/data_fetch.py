"""Fetch what a learner needs before the command starts: the model archive and the data.

- `fetch_model`: `jobs/{job}/model.zip` -> a temp file -> `safe_extract` into MODEL_DIR.
- `fetch_data`: every object under a prefix (e.g. `data/{user}/{container}/`) -> DATA_DIR,
  keeping the relative paths, a few downloads at a time.

Both raise `FetchError` whose message is the reason shown to the user.
"""

from __future__ import annotations

import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storage.object_store import ObjectStore
    from storage.settings import Settings

DATA_WORKERS = 4


class FetchError(Exception):
    """The runner could not prepare the learner; the message says why."""


def model_key(job_id: str) -> str:
    return f"jobs/{job_id}/model.zip"


def fetch_model(store: ObjectStore, settings: Settings, job_id: str, model_dir: Path) -> None:
    from storage.archive_safety import ArchiveLimits, ArchiveRefused, safe_extract

    model_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=".dlaas-model-", suffix=".zip", dir=model_dir.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        try:
            store.get_file(model_key(job_id), tmp)
        except Exception as exc:
            raise FetchError(
                f"could not fetch the model archive {model_key(job_id)}: {exc}"
            ) from exc
        try:
            safe_extract(tmp, model_dir, ArchiveLimits.from_settings(settings))
        except ArchiveRefused as exc:
            raise FetchError(f"the model archive was rejected: {exc.detail}") from exc
        except OSError as exc:
            raise FetchError(f"could not unpack the model archive: {exc}") from exc
    finally:
        tmp.unlink(missing_ok=True)


def data_target(data_dir: Path, prefix: str, key: str) -> Path:
    """Where the object `key` under `prefix` lands in `data_dir`; ValueError if unsafe."""
    rel = key[len(prefix) :]
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"unsafe data object name {key!r}")
    return data_dir.joinpath(*parts)


def normalize_prefix(prefix: str) -> str:
    prefix = prefix.strip().lstrip("/")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return prefix


def fetch_data(store: ObjectStore, prefix: str, data_dir: Path) -> int:
    """Download every object under `prefix` into `data_dir`; returns the number of files."""
    prefix = normalize_prefix(prefix)
    data_dir.mkdir(parents=True, exist_ok=True)
    if not prefix:
        return 0
    try:
        keys = [info.key for info in store.list(prefix)]
        if not keys:
            return 0
        targets = [(key, data_target(data_dir, prefix, key)) for key in keys]
        for _, target in targets:
            target.parent.mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(max_workers=min(DATA_WORKERS, len(targets))) as pool:
            for _ in pool.map(lambda kt: store.get_file(kt[0], kt[1]), targets):
                pass
    except Exception as exc:
        raise FetchError(f"could not fetch the training data under {prefix}: {exc}") from exc
    return len(keys)
