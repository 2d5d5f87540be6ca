"""The shared-memory region of one parameter server: a directory of mapped files.

```
 DIR/                      (DLAAS_PS_DIR, on /dev/shm)
   control                 server and slot words, semaphores        (created by the server)
   weights                 the model as a file: header + float32    (first learner, or a restore)
   optim                   optimizer state owned by the server      (created with the weights)
   grads                   one gradient slot per local learner      (created with the weights)
   server.lock, slot-N.lock, create.lock     flocks: who is alive, who creates the model
   failed                  why the region serves no more, if it does not (`failure`)
```

`control`: a 192-byte header (magic, slots, mode, staleness, server words, the server's
semaphore), then per slot 256 bytes: 8 words the learner writes, 8 words the server writes
(each group on its own cache lines), the slot's semaphore.

`weights`: words `magic, version, seq, numel, json_len, data_offset`, the layout as JSON from
byte 64, the float32 vector from `data_offset` (a page boundary). `version` counts updates
applied; `seq` is odd while one is being applied (a seqlock for readers, and a torn-write
marker for a restarted server). `optim`: words `magic, step (float32 in the low half), numel,
states, json_len, data_offset`, the optimizer as JSON, then `states` vectors of `numel`.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from learner_image.ps.layout import Mode, ModelLayout, OptimizerConfig
from learner_image.ps.shm import (
    FileLock,
    Semaphore,
    map_file,
    round_up,
    words,
)

CONTROL_MAGIC = 0x3143_5053_4141_4C44  # "DLAASPC1" little-endian
WEIGHTS_MAGIC = 0x3157_5053_4141_4C44  # "DLAASPW1"
OPTIM_MAGIC = 0x314F_5053_4141_4C44  # "DLAASPO1"
HEADER_BYTES = 192
SLOT_BYTES = 256
JSON_OFFSET = 64
MODES = (Mode.ASYNC, Mode.SYNC, Mode.BOUNDED)

# control header words (index into `Control.header`)
H_MAGIC, H_SLOTS, H_MODE, H_STALENESS = 0, 1, 2, 3
# server words (index into `Control.server`), from byte 32 up to the server's semaphore
S_EPOCH, S_PID, S_MODEL, S_APPLIED, S_MAX_STALENESS, S_MAX_GAP, S_LOST, S_SNAPSHOT = range(8)
S_APPLYING = 8  # how many gradients the update under way holds (while the seqlock is odd)
S_FAILED = 9  # 1: the region serves no more; the reason is in `failed` (`learner_image.ps.failure`)
SERVER_WORDS = 12
SERVER_BELL_OFFSET = 128
# slot words the learner writes
L_COMMITTED, L_LR, L_ATTACH, L_PID = range(4)
# slot words the server writes
(
    V_DRAINED,  # the last commit number the server took out of the slot
    V_RELEASED,  # the learner may write commit number V_RELEASED + 1
    V_READ_VERSION,  # the weights' version when the learner was released
    V_ATTACH_ACK,  # the learner's L_ATTACH the server has seen
    V_STALENESS,  # updates between release and application, last gradient
    V_APPLIED_AT,  # the version the last gradient was applied on top of
    V_GAP,  # clock gap at the last release (bounded mode)
    V_IN_WEIGHTS,  # how many of this slot's gradients the weights hold
) = range(8)

# weights / optim header words
W_MAGIC, W_VERSION, W_SEQ, W_NUMEL, W_JSON, W_DATA = range(6)
O_MAGIC, O_STEP, O_NUMEL, O_STATES, O_JSON, O_DATA = range(6)


@dataclass(frozen=True)
class RegionPaths:
    root: Path

    @property
    def control(self) -> Path:
        return self.root / "control"

    @property
    def weights(self) -> Path:
        return self.root / "weights"

    @property
    def optim(self) -> Path:
        return self.root / "optim"

    @property
    def grads(self) -> Path:
        return self.root / "grads"

    @property
    def failed(self) -> Path:
        return self.root / "failed"

    @property
    def server_lock(self) -> Path:
        return self.root / "server.lock"

    @property
    def create_lock(self) -> Path:
        return self.root / "create.lock"

    def slot_lock(self, slot: int) -> Path:
        return self.root / f"slot-{slot}.lock"


class Slot:
    """The words and semaphore of one gradient slot (see `learner_image.ps.slots`)."""

    def __init__(self, buffer: mmap.mmap, offset: int) -> None:
        self.learner = words(buffer, offset, 8)
        self.lr = np.frombuffer(buffer, dtype=np.float64, count=1, offset=offset + 8 * L_LR)
        self.server = words(buffer, offset + 64, 8)
        self.bell = Semaphore(buffer, offset + 128)


class Control:
    """The mapped `control` file."""

    def __init__(self, buffer: mmap.mmap) -> None:
        self.buffer = buffer
        self.header = words(buffer, 0, 4)
        if int(self.header[H_MAGIC]) != CONTROL_MAGIC:
            raise ValueError("not a dlaas parameter-server control file")
        self.slots_count = int(self.header[H_SLOTS])
        self.server = words(buffer, 32, SERVER_WORDS)
        self.bell = Semaphore(buffer, SERVER_BELL_OFFSET)
        self.slots = [Slot(buffer, HEADER_BYTES + i * SLOT_BYTES) for i in range(self.slots_count)]

    @property
    def mode(self) -> Mode:
        return MODES[int(self.header[H_MODE])]

    @property
    def staleness(self) -> int:
        return int(self.header[H_STALENESS])

    @classmethod
    def create(cls, paths: RegionPaths, slots: int, mode: Mode, staleness: int) -> Control:
        """A fresh control file, semaphores initialised, put in place atomically."""
        size = round_up(HEADER_BYTES + slots * SLOT_BYTES)
        temp = paths.root / f".control.{os.getpid()}.tmp"
        buffer = map_file(temp, size)
        header = words(buffer, 0, 4)
        header[H_SLOTS] = slots
        header[H_MODE] = MODES.index(mode)
        header[H_STALENESS] = staleness
        Semaphore(buffer, SERVER_BELL_OFFSET).initialise()
        for i in range(slots):
            Semaphore(buffer, HEADER_BYTES + i * SLOT_BYTES + 128).initialise()
        header[H_MAGIC] = CONTROL_MAGIC
        buffer.flush()
        os.replace(temp, paths.control)
        return cls(buffer)

    @classmethod
    def open(cls, paths: RegionPaths) -> Control:
        return cls(map_file(paths.control))


def read_json(buffer: mmap.mmap, length: int) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(bytes(buffer[JSON_OFFSET : JSON_OFFSET + length]))
    return data


class ModelFiles:
    """The mapped `weights`, `optim` and `grads` files and numpy views of them."""

    def __init__(self, paths: RegionPaths, slots: int) -> None:
        self.paths = paths
        self.weights_buffer = map_file(paths.weights)
        self.weights_header = words(self.weights_buffer, 0, 6)
        if int(self.weights_header[W_MAGIC]) != WEIGHTS_MAGIC:
            raise ValueError(f"{paths.weights} is not a dlaas weights file")
        meta = read_json(self.weights_buffer, int(self.weights_header[W_JSON]))
        self.layout = ModelLayout.from_json(meta)
        self.region_id = str(meta["region_id"])
        self.numel = self.layout.numel
        self.weights = np.frombuffer(
            self.weights_buffer,
            dtype=np.float32,
            count=self.numel,
            offset=int(self.weights_header[W_DATA]),
        )
        self.optim_buffer = map_file(paths.optim)
        self.optim_header = words(self.optim_buffer, 0, 6)
        self.optimizer = OptimizerConfig.from_json(
            read_json(self.optim_buffer, int(self.optim_header[O_JSON]))
        )
        self.optim_step = np.frombuffer(
            self.optim_buffer, dtype=np.float32, count=1, offset=8 * O_STEP
        )
        stride = slot_stride(self.numel)
        data = int(self.optim_header[O_DATA])
        self.states = [
            np.frombuffer(self.optim_buffer, np.float32, self.numel, data + i * stride)
            for i in range(int(self.optim_header[O_STATES]))
        ]
        self.grads_buffer = map_file(paths.grads)
        self.grads = [
            np.frombuffer(self.grads_buffer, np.float32, self.numel, i * stride)
            for i in range(slots)
        ]

    @property
    def version(self) -> int:
        return int(self.weights_header[W_VERSION])


def slot_stride(numel: int) -> int:
    return round_up(numel * 4)


def _write_model_file(
    path: Path, magic: int, header_words: list[int], meta: dict[str, Any], data_bytes: int
) -> mmap.mmap:
    encoded = json.dumps(meta, separators=(",", ":")).encode()
    data_offset = round_up(JSON_OFFSET + len(encoded))
    buffer = map_file(path, data_offset + round_up(max(data_bytes, 1)))
    buffer[JSON_OFFSET : JSON_OFFSET + len(encoded)] = encoded
    header = words(buffer, 0, 6)
    header[1 : 1 + len(header_words)] = header_words
    header[4] = len(encoded)
    header[5] = data_offset
    header[0] = magic
    return buffer


def create_model_files(
    paths: RegionPaths,
    slots: int,
    layout: ModelLayout,
    optimizer: OptimizerConfig,
    weights: np.ndarray,
    *,
    version: int = 0,
    states: np.ndarray | None = None,
    step: float = 0.0,
) -> None:
    """Write `grads`, `optim`, then `weights` (the marker that the model exists).

    The caller holds `create.lock`. Each file is written under a temporary name and renamed
    into place, so a creator that dies half-way leaves no file that looks finished.
    """
    numel = layout.numel
    stride = slot_stride(numel)
    suffix = f".{os.getpid()}.tmp"
    grads_temp = paths.grads.with_name("grads" + suffix)
    map_file(grads_temp, slots * stride).close()
    os.replace(grads_temp, paths.grads)

    optim_temp = paths.optim.with_name("optim" + suffix)
    buffer = _write_model_file(
        optim_temp,
        OPTIM_MAGIC,
        [0, numel, optimizer.states],
        optimizer.to_json(),
        optimizer.states * stride,
    )
    np.frombuffer(buffer, np.float32, 1, 8 * O_STEP)[0] = step
    if states is not None and optimizer.states:
        data = int(words(buffer, 0, 6)[O_DATA])
        for i in range(optimizer.states):
            np.frombuffer(buffer, np.float32, numel, data + i * stride)[:] = states[i]
    buffer.close()
    os.replace(optim_temp, paths.optim)

    weights_temp = paths.weights.with_name("weights" + suffix)
    meta = {**layout.to_json(), "region_id": secrets.token_hex(8), "dtype": "float32"}
    buffer = _write_model_file(weights_temp, WEIGHTS_MAGIC, [version, 0, numel], meta, numel * 4)
    data = int(words(buffer, 0, 6)[W_DATA])
    np.frombuffer(buffer, np.float32, numel, data)[:] = weights.reshape(-1)[:numel]
    buffer.close()
    os.replace(weights_temp, paths.weights)


def creation_lock(paths: RegionPaths) -> FileLock:
    return FileLock(paths.create_lock)


def ensure_directory(root: Path) -> RegionPaths:
    """The region in `root`, a directory made for this process's user alone when missing.
    One that exists is used only when it is a directory (not a link) no one else may
    write, of this user's, or (a root server's) of the uid a root-owned directory closed to
    others holds it for: the node agent's per-learner directory. Another user's directory
    at a path someone may guess is never taken for a region."""
    root.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        root.mkdir(mode=0o700)
    info = os.lstat(root)
    parent = os.lstat(root.parent)
    held_by_root = os.geteuid() == 0 and parent.st_uid == 0 and not parent.st_mode & 0o022
    if (
        not stat.S_ISDIR(info.st_mode)
        or info.st_mode & 0o022
        or not (info.st_uid == os.geteuid() or held_by_root)
    ):
        raise PermissionError(
            f"{root} is not a parameter-server region of this job's: a directory of "
            f"uid {info.st_uid} with mode {stat.filemode(info.st_mode)}, where one only its "
            "own user may write is needed (remove it, or set DLAAS_PS_DIR elsewhere)"
        )
    return RegionPaths(root)
