"""Cluster backends: where learners run (`local` processes through the node agent)."""

from __future__ import annotations

from lifecycle_manager.backends.base import ClusterBackend
from storage.settings import Settings


def open_backend(settings: Settings) -> ClusterBackend:
    if settings.cluster_backend == "local":
        from lifecycle_manager.backends.local import LocalBackend

        return LocalBackend(settings.agent_url)
    raise NotImplementedError(f"cluster backend {settings.cluster_backend!r} is not built yet")
