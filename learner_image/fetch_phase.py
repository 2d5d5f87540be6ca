"""A learner's DOWNLOADING phase: everything the command needs, fetched before it starts.

The model archive (into MODEL_DIR), the training data (DATA_DIR), the newest committed
checkpoint (CHECKPOINT_DIR) and the stored log and metrics of earlier attempts of this
learner (which this attempt's continue) are fetched in parallel. The single-process runner
does it before it starts the command; on Kubernetes the learner pod's `fetch` init container
does it, holding the job's credentials the program's container never sees.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from learner_image.runner_config import RunnerConfig, RunnerFailure

if TYPE_CHECKING:
    from storage.object_store import ObjectStore
    from storage.settings import Settings

FETCH_POLL_S = 0.05


def fetch_all(
    config: RunnerConfig,
    store: ObjectStore,
    settings: Settings,
    stopping: Callable[[], bool],
    on_slow: Callable[[], None],
) -> str | None:
    """Fetch it all; the name of the restored checkpoint, if any. `on_slow` is called while
    the fetch takes a while; `stopping()` true ends the wait early (None is returned).
    Raises RunnerFailure with the reason for the user."""
    from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait

    from learner_image.checkpoint_sync import restore_newest
    from learner_image.data_fetch import FetchError, fetch_data, fetch_model

    c = config
    for d in (c.data_dir, c.result_dir, c.checkpoint_dir):
        d.mkdir(parents=True, exist_ok=True)

    def earlier_logs() -> None:
        try:
            fetch_earlier_logs(store, c)
        except Exception as exc:  # the stored log then starts with this attempt
            print(f"dlaas-learner: no earlier log: {exc}", file=sys.stderr, flush=True)

    def restore() -> str | None:
        try:
            return restore_newest(store, c.job_id, c.checkpoint_dir, c.checkpoint_learner)
        except Exception as exc:
            raise FetchError(f"could not restore the last checkpoint: {exc}") from exc

    pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="dlaas-fetch")
    try:
        model = pool.submit(fetch_model, store, settings, c.job_id, c.model_dir)
        data = pool.submit(fetch_data, store, c.data_prefix, c.data_dir)
        ckpt = pool.submit(restore)
        logs = pool.submit(earlier_logs)
        pending: set[Future[Any]] = {model, data, ckpt, logs}
        while pending and not stopping():
            _, pending = wait(pending, timeout=FETCH_POLL_S, return_when=FIRST_EXCEPTION)
            if pending:
                on_slow()
            for fut in (model, data, ckpt, logs):
                if fut.done() and fut.exception() is not None:
                    exc = fut.exception()
                    raise RunnerFailure(str(exc)) from exc
        if stopping():
            return None
        result: str | None = ckpt.result()
        return result
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def fetch_earlier_logs(store: ObjectStore, config: RunnerConfig) -> None:
    """Continue the stored log and metrics of earlier attempts of this learner: download them
    unless the local files exist already (a reused working directory)."""
    from storage.object_store import ObjectNotFound

    for key, path in (
        (config.log_key, config.log_path),
        (config.metrics_key, config.metrics_path),
    ):
        if path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(ObjectNotFound):
            store.get_file(key, path)
