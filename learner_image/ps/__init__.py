"""The parameter-server sidecar (`dlaas-ps`) and the client training code attaches with.

GaDei's design: the weights, the optimizer state and one gradient slot per local learner
live in one shared-memory region beside the learners (`region`); a learner computes its
gradient straight into its slot and reads the weights where they are (`client`); the
server applies each committed gradient exactly once, in place, in one fused pass
(`slots`, `policy`, `kernels`, `server`). Sidecars of one job exchange aggregated updates
over TCP (`exchange`, `transport`, `peers`), snapshot to the checkpoint store
(`snapshots`), and publish the weights as a file (`model_file`); a region that serves no
more tells its learners why (`failure`). `sidecar` says how a
cluster backend runs one.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "SGD": "layout",
    "Adam": "layout",
    "Mode": "layout",
    "ModelLayout": "layout",
    "OptimizerConfig": "layout",
    "ParameterServer": "client",
    "TorchParameterServer": "client",
    "attach": "client",
    "read_model": "model_file",
    "ServerFailed": "failure",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    # Lazy, so that a backend can import `learner_image.ps.sidecar` without numpy.
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"learner_image.ps.{_EXPORTS[name]}"), name)
