"""A probe of a lock never passes for its holder: probers racing on a free lock all see it
free (the server probes the learners' slots; the stress test's learners probe each other's)."""

from __future__ import annotations

import threading
from pathlib import Path

from learner_image.ps.shm import FileLock, is_locked

PROBES = 20_000


def test_concurrent_probes_of_a_free_lock_all_see_it_free(tmp_path: Path) -> None:
    path = tmp_path / "slot-0.lock"
    path.touch()
    seen_held = [0, 0]

    def probe(k: int) -> None:
        for _ in range(PROBES):
            seen_held[k] += is_locked(path)

    threads = [threading.Thread(target=probe, args=(k,)) for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen_held == [0, 0]


def test_a_probe_sees_a_held_lock_and_does_not_disturb_it(tmp_path: Path) -> None:
    path = tmp_path / "slot-0.lock"
    lock = FileLock(path)
    assert lock.try_acquire()
    assert is_locked(path) and is_locked(path)
    assert not FileLock(path).try_acquire()
    lock.release()
    assert not is_locked(path)
