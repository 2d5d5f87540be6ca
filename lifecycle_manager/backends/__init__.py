"""Cluster backends: where learners run (`local` processes through the node agent, or
`kubernetes` pods)."""

from __future__ import annotations

from lifecycle_manager.backends.base import ClusterBackend
from storage.settings import Settings


def open_backend(settings: Settings) -> ClusterBackend:
    if settings.cluster_backend == "kubernetes":
        from lifecycle_manager.backends.kubernetes import KubernetesBackend

        return KubernetesBackend.from_settings(settings)
    from lifecycle_manager.backends.local.client import LocalBackend

    return LocalBackend.from_settings(settings)
