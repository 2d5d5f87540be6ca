"""Apply kernels: one update of the weights, in place, in one pass over shared memory.

One gradient goes through one fused torch kernel over the whole vector (`add_` for plain
SGD, `_fused_sgd_` with momentum or weight decay, `_fused_adam_`): it reads the gradient,
the weights and the optimizer state once and writes the weights and state once, with
torch's threads splitting the vector. Several gradients applied as one update (sync mode,
or gradients that must land together) are summed cache-block by cache-block into a scratch
block the size of one chunk, and each block goes through the same kernel while it is hot:
still one pass over memory, and no temporary the size of the model. Several gradients
applied as updates of their own, one after another (asynchronous mode draining every ready
slot), also share one pass: each block takes them in turn while it is hot, which for these
element-wise rules is exactly applying them one by one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from learner_image.ps.layout import OptimizerConfig

# 256 Ki floats = 1 MiB: a block of weights, state and gradients stays in a 2 MiB L2.
CHUNK = 1 << 18


class Kernel:
    """The update rule of one optimizer over tensors that live in the region."""

    def __init__(
        self,
        config: OptimizerConfig,
        weights: torch.Tensor,
        states: Sequence[torch.Tensor],
        step: torch.Tensor,
    ) -> None:
        self.config = config
        self.weights = weights
        self.states = list(states)
        self.step = step.view(())
        self._scratch = torch.empty(min(CHUNK, weights.numel()), dtype=weights.dtype)

    @property
    def _plain(self) -> bool:
        return (
            self.config.name == "sgd" and not self.config.momentum and not self.config.weight_decay
        )

    def apply(
        self,
        grads: Sequence[torch.Tensor],
        lr: float,
        gate: Callable[[int], None] | None = None,
    ) -> None:
        """One update: the weights take a step along the sum of `grads`. With several,
        `gate(stop)` is called before each block and returns once elements up to `stop`
        of every gradient are there (they may still be arriving from peers)."""
        if not grads:
            return
        self.step.add_(1)
        if len(grads) == 1:
            self._update(slice(None), grads[0], lr)
            return
        numel = self.weights.numel()
        for start in range(0, numel, CHUNK):
            block = slice(start, min(start + CHUNK, numel))
            if gate is not None:
                gate(block.stop)
            if self._plain:
                target = self.weights[block]
                for grad in grads:
                    target.add_(grad[block], alpha=-lr)
                continue
            total = self._scratch[: block.stop - block.start]
            torch.add(grads[0][block], grads[1][block], out=total)
            for grad in grads[2:]:
                total.add_(grad[block])
            self._update(block, total, lr)

    def apply_each(self, grads: Sequence[torch.Tensor], lrs: Sequence[float]) -> None:
        """Updates of their own, in order (`grads[i]` with `lrs[i]`), in one pass."""
        if len(grads) == 1:
            self.apply(grads, lrs[0])
            return
        first = float(self.step)
        numel = self.weights.numel()
        for start in range(0, numel, CHUNK):
            block = slice(start, min(start + CHUNK, numel))
            for i, (grad, lr) in enumerate(zip(grads, lrs, strict=True)):
                self.step.fill_(first + i + 1)  # the count Adam's bias correction reads
                self._update(block, grad[block], lr)
        self.step.fill_(first + len(grads))

    def _update(self, block: slice, grad: torch.Tensor, lr: float) -> None:
        c = self.config
        weights = self.weights[block]
        if self._plain:
            weights.add_(grad, alpha=-lr)
        elif c.name == "sgd":
            torch._fused_sgd_(
                [weights],
                [grad],
                [self.states[0][block]] if c.momentum else [],
                weight_decay=c.weight_decay,
                momentum=c.momentum,
                lr=lr,
                dampening=0.0,
                nesterov=False,
                maximize=False,
                is_first_step=False,
            )
        else:
            torch._fused_adam_(
                [weights],
                [grad],
                [self.states[0][block]],
                [self.states[1][block]],
                [],
                [self.step],
                lr=lr,
                beta1=c.betas[0],
                beta2=c.betas[1],
                weight_decay=c.weight_decay,
                eps=c.eps,
                amsgrad=False,
                maximize=False,
            )


def add_delta(targets: Sequence[torch.Tensor], delta: torch.Tensor) -> None:
    """Add a received update to the weights (and to the base it is measured against),
    block by block so the delta is read from memory once."""
    numel = delta.numel()
    for start in range(0, numel, CHUNK):
        block = slice(start, min(start + CHUNK, numel))
        part = delta[block]
        for target in targets:
            target[block].add_(part)


def take_delta(weights: torch.Tensor, base: torch.Tensor, out: torch.Tensor) -> None:
    """`out = weights - base; base = weights`, block by block: the change since the last
    call, ready to send, and the base moved up to now."""
    numel = weights.numel()
    for start in range(0, numel, CHUNK):
        block = slice(start, min(start + CHUNK, numel))
        torch.sub(weights[block], base[block], out=out[block])
        base[block].copy_(weights[block])
