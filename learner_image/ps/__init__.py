"""The parameter-server sidecar (`dlaas-ps`) and the client training code attaches with.

GaDei's design: the weights, the optimizer state and one gradient slot per local learner
live in one shared-memory region beside the learners (`region`); a learner computes its
gradient straight into its slot and reads the weights where they are (`client`); the
server applies each committed gradient exactly once, in place, in one fused pass
(`slots`, `policy`, `kernels`, `server`). Sidecars of one job exchange aggregated updates
over TCP (`exchange`, `transport`, `peers`), snapshot to the checkpoint store
(`snapshots`), and publish the weights as a file (`model_file`). `sidecar` says how a
cluster backend runs one.
"""

from learner_image.ps.client import ParameterServer, TorchParameterServer, attach
from learner_image.ps.layout import SGD, Adam, Mode, ModelLayout, OptimizerConfig

__all__ = [
    "SGD",
    "Adam",
    "Mode",
    "ModelLayout",
    "OptimizerConfig",
    "ParameterServer",
    "TorchParameterServer",
    "attach",
]
