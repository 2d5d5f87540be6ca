"""The model as a file: read the weights a parameter server is training, from any process.

`weights` in the region directory is the live model: a header whose second word is the
version (updates applied so far), then float32 parameters at the offsets the header's JSON
names. Any process may map it read-only, for evaluation or monitoring while training runs;
it never blocks the server.

    snapshot = read_model("/dev/shm/dlaas-ps-JOB-1")          # a consistent copy
    snapshot.version, snapshot.tensors()["fc.weight"]

A consistent copy uses the header's seqlock: copy the vector between two reads of `seq`
and keep the copy only if `seq` was even and unchanged (no update ran meanwhile), retrying
otherwise. `ModelFile.live()` gives the mapped vector itself (no copy, no consistency).
"""

from __future__ import annotations

import mmap
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from learner_image.ps.layout import ModelLayout
from learner_image.ps.region import (
    W_DATA,
    W_JSON,
    W_MAGIC,
    W_SEQ,
    W_VERSION,
    WEIGHTS_MAGIC,
    RegionPaths,
    read_json,
)
from learner_image.ps.shm import open_region_file, words

if TYPE_CHECKING:
    import torch


class TornRead(Exception):
    """No consistent copy could be made in time (the server never paused long enough)."""


@dataclass(frozen=True)
class ModelSnapshot:
    version: int
    layout: ModelLayout
    vector: np.ndarray

    def arrays(self) -> dict[str, np.ndarray]:
        return {
            p.name: self.vector[p.offset : p.offset + p.numel].reshape(p.shape)
            for p in self.layout.params
        }

    def tensors(self) -> dict[str, torch.Tensor]:
        """A state dict (views of this snapshot's copy)."""
        import torch

        return {name: torch.from_numpy(array) for name, array in self.arrays().items()}


class ModelFile:
    """A read-only mapping of a region's `weights` file."""

    def __init__(self, directory: Path) -> None:
        path = RegionPaths(directory).weights
        with os.fdopen(open_region_file(path, os.O_RDONLY), "rb") as f:
            self._buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self._header = words(self._buffer, 0, 6)
        if int(self._header[W_MAGIC]) != WEIGHTS_MAGIC:
            raise ValueError(f"{path} is not a dlaas weights file")
        self.layout = ModelLayout.from_json(read_json(self._buffer, int(self._header[W_JSON])))
        self._vector = np.frombuffer(
            self._buffer,
            dtype=np.float32,
            count=self.layout.numel,
            offset=int(self._header[W_DATA]),
        )

    @property
    def version(self) -> int:
        return int(self._header[W_VERSION])

    def live(self) -> np.ndarray:
        """The mapped weights themselves: no copy, possibly mid-update."""
        return self._vector

    def read(self, timeout: float = 10.0) -> ModelSnapshot:
        """A copy of the weights no update touched while it was taken."""
        deadline = time.monotonic() + timeout
        copy = np.empty_like(self._vector)
        while True:
            before = int(self._header[W_SEQ])
            version = int(self._header[W_VERSION])
            if before % 2 == 0:
                np.copyto(copy, self._vector)
                if int(self._header[W_SEQ]) == before:
                    return ModelSnapshot(version, self.layout, copy)
            if time.monotonic() > deadline:
                raise TornRead(f"no pause between updates in {timeout:.0f} s")
            time.sleep(0.0002)


def read_model(directory: Path | str, timeout: float = 10.0) -> ModelSnapshot:
    return ModelFile(Path(directory)).read(timeout)
