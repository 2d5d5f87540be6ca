"""Snapshots of the server's state in the checkpoint store, and restoring the newest one.

A snapshot is taken between two updates: the weights, the optimizer state and the
counters that say which gradients they hold are copied out of the region (the only pause,
one memory copy), then uploaded by a background thread while training goes on:

    jobs/{job}/ps/{rank}/snap-{version:012d}-e{epoch}/data        weights, then each state
    jobs/{job}/ps/{rank}/snap-{version:012d}-e{epoch}/COMMITTED   JSON, uploaded last

As with learner checkpoints, a snapshot exists only once its `COMMITTED` does, and it is
restored only if its data has the size and CRC-32 that `COMMITTED` records. The newest
`keep` are kept. The epoch is one per server start and grows across starts, even on a
fresh region: a starting server takes the epoch after the newest one in the store
(`newest_epoch`), so a restarted server, which may count versions again from an older
snapshot, never writes over anything.

The sidecars of one job each keep their own snapshots under their rank. In sync mode they
snapshot together, after the same round (`learner_image.ps.exchange`), so that there is a
version all of them committed (`agreed_version`) to restore (`learner_image.ps.restore`).
"""

from __future__ import annotations

import io
import json
import logging
import re
import threading
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from storage.object_store import ObjectStore

log = logging.getLogger("dlaas.ps.snapshots")

COMMITTED = "COMMITTED"
DATA = "data"
BUSY_WAIT_S = 60.0
_NAME = re.compile(r"^snap-(\d{12})-e(\d+)$")


@dataclass
class Snapshot:
    version: int
    applied: int
    drained: list[int]  # per slot: the last commit taken out of the slot
    in_weights: list[int]  # per slot: how many of its gradients the weights hold
    layout: dict[str, Any]
    optimizer: dict[str, Any]
    step: float
    weights: np.ndarray
    states: np.ndarray  # (number of optimizer states, numel)

    def record(self, epoch: int, size: int, crc: int) -> dict[str, Any]:
        return {
            "version": self.version,
            "epoch": epoch,
            "applied": self.applied,
            "drained": self.drained,
            "in_weights": self.in_weights,
            "layout": self.layout,
            "optimizer": self.optimizer,
            "step": self.step,
            "states": int(self.states.shape[0]),
            "size": size,
            "crc32": crc,
        }


class _ArrayReader(io.RawIOBase):
    """A file-like view over arrays, read in order without copying them into one buffer."""

    def __init__(self, *arrays: np.ndarray) -> None:
        self._views = [np.ascontiguousarray(a).reshape(-1).data.cast("B") for a in arrays if a.size]
        self._index = 0
        self._offset = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        target = memoryview(buffer).cast("B")
        while self._index < len(self._views):
            view = self._views[self._index]
            if self._offset < len(view):
                n = min(len(target), len(view) - self._offset)
                target[:n] = view[self._offset : self._offset + n]
                self._offset += n
                return n
            self._index += 1
            self._offset = 0
        return 0


def _crc(*arrays: np.ndarray) -> int:
    crc = 0
    for array in arrays:
        if array.size:
            crc = zlib.crc32(np.ascontiguousarray(array).reshape(-1).data.cast("B"), crc)
    return crc


class SnapshotStore:
    """Snapshots of one sidecar under `jobs/{job}/ps/{rank}/` of an object store."""

    def __init__(self, store: ObjectStore, job: str, rank: int, *, keep: int = 2) -> None:
        self.store = store
        self.job = job
        self.rank = rank
        self.prefix = f"jobs/{job}/ps/{rank}/"
        self.keep = max(1, keep)

    def of_rank(self, rank: int) -> SnapshotStore:
        """The snapshots of another sidecar of the same job, in the same store."""
        return SnapshotStore(self.store, self.job, rank, keep=self.keep)

    def _stored(self) -> list[tuple[int, int, str, bool]]:
        """Every snapshot name under the prefix: (version, epoch, name, committed), sorted."""
        found: dict[str, bool] = {}
        for info in self.store.list(self.prefix):
            name, _, rel = info.key[len(self.prefix) :].partition("/")
            if _NAME.match(name):
                found[name] = found.get(name, False) or rel == COMMITTED
        return sorted(
            (int(m.group(1)), int(m.group(2)), name, committed)
            for name, committed in found.items()
            if (m := _NAME.match(name))
        )

    def _committed(self) -> list[tuple[int, int, str]]:
        return [(v, e, name) for v, e, name, committed in self._stored() if committed]

    def newest_epoch(self) -> int:
        """The highest epoch of any snapshot here, committed or not (0 if none)."""
        return max((epoch for _, epoch, _, _ in self._stored()), default=0)

    def versions(self) -> set[int]:
        """The versions of the committed snapshots."""
        return {version for version, _, _ in self._committed()}

    def save(self, snapshot: Snapshot, epoch: int) -> str:
        name = f"snap-{snapshot.version:012d}-e{epoch}"
        base = f"{self.prefix}{name}/"
        self.store.delete_prefix(base)
        reader = io.BufferedReader(_ArrayReader(snapshot.weights, snapshot.states), 1 << 20)
        size = self.store.put_stream(base + DATA, reader)
        record = snapshot.record(epoch, size, _crc(snapshot.weights, snapshot.states))
        self.store.put_bytes(base + COMMITTED, json.dumps(record).encode())
        self._prune()
        return name

    def _prune(self) -> None:
        """Drop committed snapshots past the newest `keep`, and partial ones older than the
        newest committed (a newer partial one may still be on its way up)."""
        stored = self._stored()
        committed = [(v, e, name) for v, e, name, done in stored if done]
        if not committed:
            return
        kept = {name for _, _, name in committed[-self.keep :]}
        newest = committed[-1][:2]
        for version, epoch, name, _ in stored:
            if name not in kept and (version, epoch) < newest:
                self.store.delete_prefix(f"{self.prefix}{name}/")

    def latest(self, version: int | None = None) -> Snapshot | None:
        """The newest committed snapshot whose data verifies (of `version`, if given)."""
        for found, _epoch, name in reversed(self._committed()):
            if version is not None and found != version:
                continue
            base = f"{self.prefix}{name}/"
            try:
                record = json.loads(self.store.get_bytes(base + COMMITTED))
                data = self.store.get_bytes(base + DATA)
            except Exception as error:  # a store error or a malformed record: try older
                log.warning("snapshot %s unreadable: %s", name, error)
                continue
            numel = int(record["layout"]["numel"])
            states = int(record["states"])
            if len(data) != record["size"] or len(data) != 4 * numel * (1 + states):
                log.warning(
                    "snapshot %s has %d bytes, expected %s", name, len(data), record["size"]
                )
                continue
            flat = np.frombuffer(data, dtype=np.float32)
            weights, rest = flat[:numel], flat[numel:].reshape(states, numel)
            if _crc(weights, rest) != record["crc32"]:
                log.warning("snapshot %s fails its CRC; trying an older one", name)
                continue
            return Snapshot(
                version=int(record["version"]),
                applied=int(record["applied"]),
                drained=[int(x) for x in record["drained"]],
                in_weights=[int(x) for x in record["in_weights"]],
                layout=record["layout"],
                optimizer=record["optimizer"],
                step=float(record["step"]),
                weights=weights.copy(),
                states=rest.copy(),
            )
        return None


def agreed_version(stores: Sequence[SnapshotStore]) -> int | None:
    """The newest version every one of `stores` has committed, or None."""
    common: set[int] | None = None
    for store in stores:
        versions = store.versions()
        common = versions if common is None else common & versions
    return max(common) if common else None


class Snapshotter:
    """Takes a snapshot when one is due and uploads it in the background, one at a time."""

    def __init__(
        self,
        store: SnapshotStore,
        interval_s: float,
        epoch: int,
        on_stored: Callable[[Snapshot], None] | None = None,
    ) -> None:
        self.store = store
        self.interval_s = interval_s
        self.epoch = epoch
        self.on_stored = on_stored
        self._idle = threading.Event()
        self._idle.set()
        self._last = 0.0
        self.taken = 0
        self.last_name: str | None = None

    def due(self, now: float) -> bool:
        return self.interval_s > 0 and now - self._last >= self.interval_s and self._idle.is_set()

    def take(self, now: float, capture: Callable[[], Snapshot]) -> None:
        """Copy the state now (the caller is between updates), upload it in the background;
        one upload at a time, since the next capture reuses the buffer the last one reads."""
        self._last = now
        if not self._idle.wait(BUSY_WAIT_S):
            log.warning("the last snapshot is still uploading; skipping this one")
            return
        snapshot = capture()
        self._idle.clear()
        threading.Thread(target=self._upload, args=(snapshot,), daemon=True).start()

    def _upload(self, snapshot: Snapshot) -> None:
        try:
            self.last_name = self.store.save(snapshot, self.epoch)
            self.taken += 1
            if self.on_stored is not None:
                self.on_stored(snapshot)
        except Exception:
            log.exception("snapshot of version %d not stored", snapshot.version)
        finally:
            self._idle.set()

    def wait_idle(self, timeout: float) -> bool:
        """Wait for an upload in progress to finish (at shutdown)."""
        return self._idle.wait(timeout)
