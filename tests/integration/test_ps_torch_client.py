"""`ps.attach` on a PyTorch model: parameters bound in place, and staged through the slot
(what a GPU learner's parameters are); both against a real `dlaas-ps` server."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from learner_image import ps
from learner_image.ps.layout import SGD
from tests.integration import ps_harness
from tests.integration.ps_harness import ThreadServer, settled, wait_for

base = ps_harness.base

STEPS = 30
SERVER = ("--mode", "async", "--threads", "1", "--snapshot-interval", "0")


def model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(7)
    return [
        (torch.randn(32, 8, generator=generator), torch.randint(0, 3, (32,), generator=generator))
        for _ in range(STEPS)
    ]


def train(directory: Path, staged: bool) -> tuple[torch.nn.Module, list[float]]:
    """One learner, STEPS steps of SGD through its own server; the model and its losses."""
    server = ThreadServer([*SERVER, "--dir", str(directory), "--slots", "1"])
    net = model(seed=1)
    handle = ps.attach(net, SGD(lr=0.2), directory=directory, slot=0, timeout=30, staged=staged)
    losses = []
    try:
        for x, y in batches():
            handle.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(x), y)
            loss.backward()
            handle.step()
            losses.append(loss.item())
        assert handle.version == STEPS
    finally:
        handle.close()
        server.stop()
    return net, losses


def in_region(param: torch.Tensor, handle: ps.TorchParameterServer) -> bool:
    start = handle.client.weights.ctypes.data
    return start <= param.data_ptr() < start + handle.client.weights.nbytes


def test_staged_parameters_train_exactly_as_bound_ones(base: Path) -> None:
    bound, bound_losses = train(base / "bound", staged=False)
    staged, staged_losses = train(base / "staged", staged=True)

    assert staged_losses == bound_losses
    assert staged_losses[-1] < staged_losses[0]
    for a, b in zip(bound.parameters(), staged.parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_staged_learner_keeps_its_storage_and_follows_the_shared_weights(base: Path) -> None:
    """Learner 0 seeds the model and binds in place; learner 1, staged, starts from the
    shared weights rather than its own, and after each of learner 0's updates and its own
    step it holds the server's weights in its own tensors."""
    directory = base / "region"
    server = ThreadServer([*SERVER, "--dir", str(directory), "--slots", "2"])
    seeded, follower = model(seed=1), model(seed=2)
    first = ps.attach(seeded, SGD(lr=0.2), directory=directory, slot=0, timeout=30)
    second = ps.attach(follower, directory=directory, slot=1, timeout=30, staged=True)
    try:
        assert all(in_region(p, first) for p in seeded.parameters())
        assert not any(in_region(p, second) for p in follower.parameters())
        for a, b in zip(seeded.parameters(), follower.parameters(), strict=True):
            assert torch.equal(a, b)

        x, y = batches()[0]
        for handle, net in ((first, seeded), (second, follower)):
            handle.zero_grad()
            torch.nn.functional.cross_entropy(net(x), y).backward()
            handle.step()
        wait_for(lambda: settled(server.server.control), 10, "both updates applied")
        assert second.version == 2
        for a, b in zip(seeded.parameters(), follower.parameters(), strict=True):
            assert torch.equal(a, b)  # the seeder's tensors are the shared weights
    finally:
        first.close()
        second.close()
        server.stop()


def test_attach_refuses_a_half_precision_model_naming_the_fix(base: Path) -> None:
    with pytest.raises(ValueError, match=r"parameter 0\.weight: .* call model\.float\(\)"):
        ps.attach(model(seed=1).half(), directory=base / "region", timeout=1)
