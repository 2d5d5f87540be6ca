"""The learner's side: attach a model to the pod's parameter server, then `step()`.

    from learner_image import ps

    server = ps.attach(model, ps.Adam(lr=1e-3))   # parameters now live in shared memory
    for x, y in batches:
        server.zero_grad()                        # zeroes this learner's gradient slot
        loss_fn(model(x), y).backward()           # the gradient lands in the slot
        server.step(lr=schedule(step))            # replaces optimizer.step()

After `attach`, every CPU parameter's `.data` is a view of the shared weights and its
`.grad` a view of this learner's slot: nothing is copied in or out. `step()` publishes the
slot and returns once the server has applied the gradient and the mode lets this learner go
on (`learner_image.ps.policy`); the model then holds the new weights. The slot is
`LOCAL_RANK` (one learner per GPU), else 0; the directory `DLAAS_PS_DIR`.

A parameter on a GPU cannot live in shared memory, so it is staged: it stays on its
device, `step()` copies its gradient into the slot before publishing it and the new weights
back onto the device after. `attach(..., staged=True)` stages CPU parameters the same way,
for a model whose tensors must keep their own storage.

If the server is down, `step()` waits for it to come back (the sidecar is restarted and
restores its snapshot) and then goes on. A learner that is restarted attaches again to its
slot and continues.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from learner_image.ps.layout import Mode, ModelLayout, OptimizerConfig
from learner_image.ps.region import (
    S_MODEL,
    V_GAP,
    V_STALENESS,
    W_VERSION,
    Control,
    ModelFiles,
    create_model_files,
    creation_lock,
    ensure_directory,
)
from learner_image.ps.server_config import default_directory
from learner_image.ps.slots import LearnerSlot, ServerGone

if TYPE_CHECKING:
    import torch

log = logging.getLogger("dlaas.ps.client")

DEFAULT_ATTACH_TIMEOUT_S = 120.0


def region_directory(environ: Mapping[str, str] | None = None) -> Path:
    e = os.environ if environ is None else environ
    return Path(e["DLAAS_PS_DIR"]) if e.get("DLAAS_PS_DIR") else default_directory(e)


def default_slot(environ: Mapping[str, str] | None = None) -> int:
    e = os.environ if environ is None else environ
    return int(e.get("LOCAL_RANK") or 0)


class ParameterServer:
    """One learner's connection to its pod's parameter server, over flat float32 vectors."""

    def __init__(
        self,
        directory: Path | None = None,
        slot: int | None = None,
        *,
        timeout: float = DEFAULT_ATTACH_TIMEOUT_S,
    ) -> None:
        self.paths = ensure_directory(directory or region_directory())
        self.timeout = timeout
        deadline = time.monotonic() + timeout
        while not self.paths.control.exists():
            if time.monotonic() > deadline:
                raise ServerGone(f"no parameter server started in {self.paths.root}")
            time.sleep(0.02)
        self.control = Control.open(self.paths)
        self.slot = LearnerSlot(self.control, self.paths, default_slot() if slot is None else slot)
        self.files: ModelFiles | None = None
        self._warned_down = False

    @property
    def mode(self) -> Mode:
        return self.control.mode

    def attach(
        self, layout: ModelLayout, optimizer: OptimizerConfig, initial: np.ndarray
    ) -> ModelFiles:
        """Claim the slot, create the model from `initial` unless it exists, and wait until
        the server serves it; the mapped files (the weights may be another learner's)."""
        self.slot.claim(self.timeout)
        lock = creation_lock(self.paths)
        lock.acquire(self.timeout, "creating the model")
        try:
            if not self.paths.weights.exists():
                create_model_files(self.paths, self.control.slots_count, layout, optimizer, initial)
                self.control.bell.post()
        finally:
            lock.release()
        files = ModelFiles(self.paths, self.control.slots_count)
        difference = layout.describe_difference(files.layout)
        if difference is not None:
            raise ValueError(f"this model does not match the parameter server's: {difference}")
        self.files = files
        self.slot.wait(
            lambda: (
                int(self.control.server[S_MODEL]) == 1
                and self.slot.acknowledged
                and self.slot.writable
            ),
            self.timeout,
        )
        return files

    @property
    def weights(self) -> np.ndarray:
        return self._files.weights

    @property
    def gradient(self) -> np.ndarray:
        """This learner's slot: write the gradient here while the slot is writable."""
        return self._files.grads[self.slot.index]

    @property
    def _files(self) -> ModelFiles:
        if self.files is None:
            raise RuntimeError("attach() first")
        return self.files

    @property
    def version(self) -> int:
        """How many updates the weights have had."""
        return int(self._files.weights_header[W_VERSION])

    @property
    def last_staleness(self) -> int:
        """Updates applied between this learner's read and its last gradient's application."""
        return int(self.slot.words.server[V_STALENESS])

    @property
    def last_gap(self) -> int:
        """Steps this learner was ahead of the slowest one when last released (bounded)."""
        return int(self.slot.words.server[V_GAP])

    def commit(self, lr: float | None = None) -> int:
        return self.slot.commit(self._files.optimizer.lr if lr is None else lr)

    def wait_released(self, timeout: float | None = None) -> None:
        self.slot.wait(lambda: self.slot.writable, timeout, self._server_down)
        if self._warned_down:
            log.warning("parameter server is back; going on")
            self._warned_down = False

    def push(self, lr: float | None = None, timeout: float | None = None) -> int:
        """Commit the gradient in the slot and wait until it is applied and this learner
        may go on; the commit number."""
        committed = self.commit(lr)
        self.wait_released(timeout)
        return committed

    def _server_down(self, waited: float) -> None:
        if not self._warned_down:
            log.warning("parameter server is down; waiting for it to come back")
            self._warned_down = True

    def close(self) -> None:
        self.slot.release_claim()


class TorchParameterServer:
    """A PyTorch model whose parameters and gradients live in the parameter server: bound
    in place where they can be (CPU), staged through the slot where they cannot (GPU)."""

    def __init__(
        self, model: torch.nn.Module, client: ParameterServer, *, staged: bool = False
    ) -> None:
        import torch

        self.model = model
        self.client = client
        self._weights = torch.from_numpy(client.weights)
        self._grad = torch.from_numpy(client.gradient)
        files = client._files
        self._bound: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
        self._staged: list[tuple[torch.nn.Parameter, torch.Tensor, torch.Tensor]] = []
        for (_name, param), spec in zip(model.named_parameters(), files.layout.params, strict=True):
            span = slice(spec.offset, spec.offset + spec.numel)
            weights = self._weights[span].view(spec.shape)
            grad = self._grad[span].view(spec.shape)
            with torch.no_grad():
                if staged or param.device.type != "cpu":
                    param.data.copy_(weights)  # the shared weights, whoever seeded them
                    self._staged.append((param, weights, grad))
                else:
                    param.data = weights
                    param.grad = grad
                    self._bound.append((param, grad))

    @property
    def version(self) -> int:
        return self.client.version

    def zero_grad(self) -> None:
        """Zero this learner's gradients (the slot is writable whenever `step()` has
        returned)."""
        self._grad.zero_()
        for param, grad in self._bound:
            param.grad = grad
        for param, _weights, _grad in self._staged:
            if param.grad is not None:
                param.grad.zero_()

    def step(self, lr: float | None = None) -> int:
        """Push the gradient and wait for the new weights; replaces `optimizer.step()`."""
        import torch

        for param, grad in self._bound:
            if param.grad is None:
                grad.zero_()
            elif param.grad.data_ptr() != grad.data_ptr():
                grad.copy_(param.grad)  # the training code replaced .grad: take its values
            param.grad = grad
        for param, _weights, grad in self._staged:
            if param.grad is None:
                grad.zero_()
            else:
                grad.copy_(param.grad)  # from the device into the slot, once it is computed
        committed = self.client.push(lr)
        with torch.no_grad():
            for param, weights, _grad in self._staged:
                param.data.copy_(weights)
        return committed

    def close(self) -> None:
        self.client.close()


def attach(
    model: torch.nn.Module,
    optimizer: OptimizerConfig | None = None,
    *,
    directory: Path | None = None,
    slot: int | None = None,
    timeout: float = DEFAULT_ATTACH_TIMEOUT_S,
    staged: bool = False,
) -> TorchParameterServer:
    """Put `model`'s parameters into the pod's parameter server (the first learner's values
    seed it; later learners take the shared ones) and return the handle to step with.
    `staged`: copy CPU parameters through the slot too, as GPU ones always are."""
    import torch

    named = list(model.named_parameters())
    for name, param in named:
        if param.dtype != torch.float32:
            raise ValueError(
                f"parameter {name}: the parameter server holds float32 tensors, not "
                f"{param.dtype}; call model.float() before attaching"
            )
    layout = ModelLayout.of((name, tuple(param.shape)) for name, param in named)
    initial = np.zeros(layout.numel, dtype=np.float32)
    for (_name, param), spec in zip(named, layout.params, strict=True):
        initial[spec.offset : spec.offset + spec.numel] = param.detach().reshape(-1).cpu().numpy()
    client = ParameterServer(directory, slot, timeout=timeout)
    client.attach(layout, optimizer or OptimizerConfig(), initial)
    return TorchParameterServer(model, client, staged=staged)
