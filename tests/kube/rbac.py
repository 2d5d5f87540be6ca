"""What the kubernetes backend and the pod watcher may do, as the chart's RBAC grants it:
verbs per resource, in the learners' namespace and cluster-wide (gang admission)."""

from __future__ import annotations

NAMESPACED = {
    "pods": {"create", "delete", "list", "watch"},
    "services": {"create", "delete"},
    "secrets": {"create", "delete", "patch"},
    "networkpolicies": {"create", "delete"},
}
CLUSTER_WIDE = {"nodes": {"list"}, "pods": {"list"}}
