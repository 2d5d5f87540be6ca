"""What the region holds, as plain data: the model's parameters, the optimizer, the mode.

Pure. The model is one flat float32 vector; each parameter is a view of it at an offset
aligned to 16 floats (64 bytes), so every parameter starts on a cache line.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

ALIGN_FLOATS = 16


class Mode(StrEnum):
    ASYNC = "async"  # Downpour/GaDei: each gradient applied as it arrives, version bound
    SYNC = "sync"  # one update per step: the sum of every learner's gradient
    BOUNDED = "bounded"  # stale-synchronous: no learner more than `staleness` steps ahead


# Async mode bounds how many updates may land between a learner's read of the weights and
# the application of its gradient. Without an explicit bound it allows this many per
# learner: room for every other learner to be a few gradients ahead, never unbounded.
ASYNC_STALENESS_PER_LEARNER = 4


def default_staleness(mode: Mode, learners: int) -> int:
    if mode is Mode.SYNC:
        return 0
    if mode is Mode.BOUNDED:
        raise ValueError("mode bounded needs a staleness bound")
    return ASYNC_STALENESS_PER_LEARNER * max(1, learners)


@dataclass(frozen=True)
class Param:
    name: str
    shape: tuple[int, ...]
    offset: int  # in floats, from the start of the weights

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class ModelLayout:
    params: tuple[Param, ...]
    numel: int  # padded total

    @classmethod
    def of(cls, shapes: Iterable[tuple[str, tuple[int, ...]]]) -> ModelLayout:
        params = []
        offset = 0
        for name, shape in shapes:
            param = Param(name, tuple(int(d) for d in shape), offset)
            params.append(param)
            offset += -(-param.numel // ALIGN_FLOATS) * ALIGN_FLOATS
        return cls(tuple(params), max(offset, ALIGN_FLOATS))

    def to_json(self) -> dict[str, Any]:
        return {
            "numel": self.numel,
            "params": [
                {"name": p.name, "shape": list(p.shape), "offset": p.offset} for p in self.params
            ],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelLayout:
        params = tuple(
            Param(str(p["name"]), tuple(int(d) for d in p["shape"]), int(p["offset"]))
            for p in data["params"]
        )
        return cls(params, int(data["numel"]))

    def describe_difference(self, other: ModelLayout) -> str | None:
        """None when the layouts match, else what differs first (for an error message)."""
        if len(self.params) != len(other.params):
            return f"{len(self.params)} parameters here, {len(other.params)} in the region"
        for mine, theirs in zip(self.params, other.params, strict=True):
            if (mine.name, mine.shape) != (theirs.name, theirs.shape):
                return (
                    f"parameter {mine.name} {list(mine.shape)} here is "
                    f"{theirs.name} {list(theirs.shape)} in the region"
                )
        return None


@dataclass(frozen=True)
class OptimizerConfig:
    """The update rule the server applies; `lr` is the default when a push gives none."""

    name: str = "sgd"  # sgd | adam
    lr: float = 0.01
    momentum: float = 0.0
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8

    def __post_init__(self) -> None:
        if self.name not in ("sgd", "adam"):
            raise ValueError(f"optimizer {self.name!r}: use 'sgd' or 'adam'")
        if self.lr < 0 or self.momentum < 0 or self.weight_decay < 0 or self.eps <= 0:
            raise ValueError("optimizer: lr, momentum and weight_decay must be >= 0, eps > 0")

    @property
    def states(self) -> int:
        """How many model-sized state vectors the optimizer keeps."""
        if self.name == "adam":
            return 2
        return 1 if self.momentum else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "lr": self.lr,
            "momentum": self.momentum,
            "weight_decay": self.weight_decay,
            "betas": list(self.betas),
            "eps": self.eps,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OptimizerConfig:
        betas = data.get("betas", (0.9, 0.999))
        return cls(
            name=str(data.get("name", "sgd")),
            lr=float(data.get("lr", 0.01)),
            momentum=float(data.get("momentum", 0.0)),
            weight_decay=float(data.get("weight_decay", 0.0)),
            betas=(float(betas[0]), float(betas[1])),
            eps=float(data.get("eps", 1e-8)),
        )


def SGD(lr: float = 0.01, momentum: float = 0.0, weight_decay: float = 0.0) -> OptimizerConfig:
    return OptimizerConfig("sgd", lr=lr, momentum=momentum, weight_decay=weight_decay)


def Adam(
    lr: float = 0.001,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
) -> OptimizerConfig:
    return OptimizerConfig("adam", lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
