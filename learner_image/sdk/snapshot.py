"""Copies of a training state that later training steps cannot change: what a background
checkpoint serializes while training goes on.

`take_snapshot(state, pool)` walks dicts (plain and ordered), lists and tuples; copies torch
tensors and numpy arrays value for value (not serialized: a memcpy); deep-copies anything else
(small Python objects: counters, RNG states, configs). The same object met twice is copied
once, so tied weights stay tied. A tensor on a device (GPU) is copied to the CPU, which is where
`load_checkpoint` puts it by default anyway.

Copies go into buffers reused from earlier snapshots (`BufferPool`): allocating fresh memory
for a large state costs far more than copying into memory already mapped (each new page is a
page fault; about 1.5 s against 30 ms for 500 MB on the development machines), and a training
job saves a state of the same shapes again and again.
"""

from __future__ import annotations

import copy
import sys
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

_IMMUTABLE = (int, float, bool, complex, str, bytes, type(None), range)

BufferKey = tuple[Hashable, ...]


class BufferPool:
    """Tensors and arrays finished snapshots no longer need, by (kind, dtype, shape).

    It holds at most two of the largest snapshot taken so far, the buffers given back last
    (a state whose shapes changed does not keep the old shapes' memory). Two, because while
    the writer lags (a save takes longer than the time to the next), one copy is being
    written as the next is taken: two sets then take turns, and both are kept when the writer
    catches up, so that the next lag needs no fresh memory either. That is no more memory
    than the lag itself needs.
    """

    SNAPSHOTS_KEPT = 2

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: dict[BufferKey, list[Any]] = {}
        self._given: dict[int, BufferKey] = {}  # id(buffer) -> key, the oldest given first
        self._bytes = 0
        self.limit = 0

    @property
    def nbytes(self) -> int:
        return self._bytes

    def take(self, key: BufferKey) -> Any | None:
        with self._lock:
            free = self._free.get(key)
            if not free:
                return None
            return self._remove(key, free[-1])

    def give(self, buffers: Iterable[tuple[BufferKey, Any]]) -> None:
        with self._lock:
            for key, buf in buffers:
                self._free.setdefault(key, []).append(buf)
                self._given[id(buf)] = key
                self._bytes += buf.nbytes
            while self._bytes > self.limit:  # dropped: freed once nothing else holds them
                oldest, key = next(iter(self._given.items()))
                self._remove(key, next(b for b in self._free[key] if id(b) == oldest))

    def _remove(self, key: BufferKey, buf: Any) -> Any:
        free = self._free[key]
        del free[next(i for i, b in enumerate(free) if b is buf)]  # by identity, not ==
        if not free:
            del self._free[key]
        del self._given[id(buf)]
        self._bytes -= buf.nbytes
        return buf


@dataclass
class Snapshot:
    state: Any
    buffers: list[tuple[BufferKey, Any]] = field(default_factory=list)  # give back when done
    nbytes: int = 0


def take_snapshot(state: Any, pool: BufferPool) -> Snapshot:
    """A copy of `state` that shares no mutable memory with it (see the module's doc)."""
    taker = _Taker(pool)
    copied = taker.copy(state)
    snap = Snapshot(copied, taker.buffers, taker.nbytes)
    pool.limit = max(pool.limit, BufferPool.SNAPSHOTS_KEPT * snap.nbytes)
    return snap


class _Taker:
    def __init__(self, pool: BufferPool) -> None:
        self.pool = pool
        self.memo: dict[int, Any] = {}  # id(original) -> copy; shared with copy.deepcopy
        self.buffers: list[tuple[BufferKey, Any]] = []
        self.nbytes = 0
        # Only libraries the program imported can have made its objects: never import them.
        self.torch = sys.modules.get("torch")
        self.numpy = sys.modules.get("numpy")

    def copy(self, obj: Any) -> Any:
        kind = type(obj)
        if kind in _IMMUTABLE:
            return obj
        key = id(obj)
        if key in self.memo:
            return self.memo[key]
        if kind is dict or kind is OrderedDict:
            new_map: dict[Any, Any] = kind()
            self.memo[key] = new_map
            for name, value in obj.items():
                new_map[name] = self.copy(value)
            extra = getattr(obj, "__dict__", None)  # state_dict()'s `_metadata`
            if extra:
                new_map.__dict__.update(copy.deepcopy(extra, self.memo))
            return new_map
        if kind is list:
            new_list: list[Any] = []
            self.memo[key] = new_list
            new_list.extend(self.copy(value) for value in obj)
            return new_list
        if kind is tuple:
            return tuple(self.copy(value) for value in obj)
        torch = self.torch
        if torch is not None and kind in (torch.Tensor, torch.nn.Parameter):
            copied = self._tensor(obj)
        elif self.numpy is not None and kind is self.numpy.ndarray and not obj.dtype.hasobject:
            copied = self._array(obj)
        else:
            copied = copy.deepcopy(obj, self.memo)
        self.memo[key] = copied
        return copied

    def _tensor(self, t: Any) -> Any:
        torch = self.torch
        assert torch is not None
        source = t.detach()
        if source.layout is not torch.strided or source.is_quantized or source.is_meta:
            out = source.to("cpu", copy=True)  # rare kinds: a plain copy, no reuse
        else:
            key: BufferKey = ("torch", source.dtype, tuple(source.shape))
            buf = self.pool.take(key)
            if buf is None:
                buf = torch.empty(source.shape, dtype=source.dtype)
            buf.copy_(source)
            self.buffers.append((key, buf))
            self.nbytes += buf.nbytes
            out = buf
        if isinstance(t, torch.nn.Parameter):
            return torch.nn.Parameter(out, requires_grad=t.requires_grad)
        if t.requires_grad:
            return out.detach().requires_grad_(True)  # not on the pooled buffer itself
        return out

    def _array(self, a: Any) -> Any:
        np = self.numpy
        assert np is not None
        key: BufferKey = ("numpy", a.dtype, a.shape)
        buf = self.pool.take(key)
        if buf is None:
            buf = np.empty(a.shape, dtype=a.dtype)
        np.copyto(buf, a)
        self.buffers.append((key, buf))
        self.nbytes += buf.nbytes
        return buf
