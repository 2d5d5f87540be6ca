"""Layout, kernels, configuration and sidecar wiring of the parameter server."""

from __future__ import annotations

import pytest
import torch

from learner_image.ps import sidecar
from learner_image.ps.kernels import CHUNK, Kernel
from learner_image.ps.layout import ALIGN_FLOATS, SGD, Adam, Mode, ModelLayout
from learner_image.ps.server_config import parse_config


def test_layout_aligns_parameters_and_round_trips() -> None:
    layout = ModelLayout.of([("a", (3, 5)), ("b", (7,))])
    assert [p.offset for p in layout.params] == [0, 16]
    assert layout.numel % ALIGN_FLOATS == 0
    assert ModelLayout.from_json(layout.to_json()) == layout
    other = ModelLayout.of([("a", (3, 5)), ("b", (8,))])
    assert "b" in (layout.describe_difference(other) or "")


@pytest.mark.parametrize("config", [SGD(lr=0.1, momentum=0.9, weight_decay=0.01), Adam(lr=0.01)])
def test_kernel_matches_torch_optimizers(config: object) -> None:
    torch.manual_seed(0)
    numel = CHUNK + 37  # more than one block
    start = torch.randn(numel)
    grads = [torch.randn(numel) for _ in range(3)]
    reference = start.clone().requires_grad_(True)
    if config.name == "sgd":  # type: ignore[attr-defined]
        optimizer: torch.optim.Optimizer = torch.optim.SGD(
            [reference], lr=0.1, momentum=0.9, weight_decay=0.01
        )
    else:
        optimizer = torch.optim.Adam([reference], lr=0.01)
    weights = start.clone()
    states = [torch.zeros(numel) for _ in range(config.states)]  # type: ignore[attr-defined]
    kernel = Kernel(config, weights, states, torch.zeros(1))  # type: ignore[arg-type]
    kernel.apply([grads[0]], 0.1 if config.name == "sgd" else 0.01)  # type: ignore[attr-defined]
    kernel.apply(grads[1:], 0.1 if config.name == "sgd" else 0.01)  # type: ignore[attr-defined]
    for grad in (grads[0], grads[1] + grads[2]):
        reference.grad = grad.clone()
        optimizer.step()
    torch.testing.assert_close(weights, reference.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "config", [SGD(lr=0.1), SGD(lr=0.1, momentum=0.9, weight_decay=0.01), Adam(lr=0.01)]
)
def test_updates_fused_in_one_pass_equal_applying_them_one_by_one(config: object) -> None:
    torch.manual_seed(1)
    numel = 2 * CHUNK + 37
    grads = [torch.randn(numel) for _ in range(3)]
    lrs = [0.1, 0.05, 0.2]
    start = torch.randn(numel)
    kernels = []
    for _ in range(2):
        states = [torch.zeros(numel) for _ in range(config.states)]  # type: ignore[attr-defined]
        kernels.append(Kernel(config, start.clone(), states, torch.zeros(1)))  # type: ignore[arg-type]
    fused, one_by_one = kernels
    for _ in range(2):  # twice: the step count carries on from the first round
        fused.apply_each(grads, lrs)
        for grad, lr in zip(grads, lrs, strict=True):
            one_by_one.apply([grad], lr)
    assert torch.equal(fused.weights, one_by_one.weights)
    for a, b in zip(fused.states, one_by_one.states, strict=True):
        assert torch.equal(a, b)
    assert float(fused.step) == float(one_by_one.step) == 6.0


def test_configuration_from_the_environment_and_its_errors() -> None:
    env = {
        "TRAINING_ID": "j1",
        "LEARNER_ID": "2",
        "NUM_LEARNERS": "2",
        "DLAAS_PS_MODE": "sync",
        "DLAAS_PS_PEERS": "a:1,b:2",
        "GPU_COUNT": "4",
    }
    config = parse_config([], env)
    assert (config.mode, config.staleness, config.rank, config.world, config.slots) == (
        Mode.SYNC,
        0,
        1,
        2,
        4,
    )
    assert str(config.directory) == "/dev/shm/dlaas-ps-j1-2"
    assert parse_config(["--region", "/dev/shm/r", "--job", "j"], {}).directory.name == "r"
    assert parse_config(["--mode", "async", "--slots", "3"], {}).staleness == 12
    with pytest.raises(SystemExit):
        parse_config(["--mode", "bounded"], {})
    with pytest.raises(SystemExit):
        parse_config(["--world", "2"], {})
    assert config.peer_timeout_s == 300.0
    assert parse_config([], {"DLAAS_PS_PEER_TIMEOUT": "7.5"}).peer_timeout_s == 7.5
    with pytest.raises(SystemExit):
        parse_config(["--peer-timeout", "0"], {})


def test_sidecar_wiring() -> None:
    assert sidecar.wanted({"DLAAS_PS_MODE": "async"}) and not sidecar.wanted({})
    env = sidecar.sidecar_env(
        {"DLAAS_PS_MODE": "sync", "RANK": "0", "DATA_DIR": "/d", "PATH": "/bin"},
        {"DLAAS_PS_DIR": "/dev/shm/x"},
    )
    assert env == {
        "DLAAS_PS_MODE": "sync",
        "RANK": "0",
        "PATH": "/bin",
        "DLAAS_PS_DIR": "/dev/shm/x",
    }
    assert sidecar.kubernetes_peers("j", "ns", 2) == (
        "learner-1.dlaas-j.ns.svc:7070,learner-2.dlaas-j.ns.svc:7070"
    )
