"""How amounts read in the reasons users see: "4 GPUs (A100)", "1.5 CPUs", "16 GiB"."""

from __future__ import annotations

from lifecycle_manager.scheduler.model import GIB


def describe_gpus(count: int, product: str | None) -> str:
    noun = "GPU" if count == 1 else "GPUs"
    return f"{count} {noun} ({product})" if product else f"{count} {noun}"


def describe_millicpus(millicpus: int) -> str:
    cpus = millicpus / 1000
    return f"{cpus:g} CPU" if cpus == 1 else f"{cpus:g} CPUs"


def describe_memory(memory: int) -> str:
    return f"{memory / GIB:.3g} GiB memory"


def describe_gang(learners: int, gpus: int, product: str | None) -> str:
    """The GPUs a whole gang needs: "4 GPUs (A100)", or "2 x 4 GPUs (A100)" for 2 learners."""
    each = describe_gpus(gpus, product)
    return each if learners == 1 else f"{learners} x {each}"
