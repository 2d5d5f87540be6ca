"""What the kubernetes backend and the pod watcher may do, as the chart's RBAC grants it:
verbs per resource, in the learners' namespace and cluster-wide (gang admission); and what
the shutdown hook `helm uninstall` runs first may do, in the release's namespace (scale the
workers and the monitor, see their pods go) and in the learners' (stop the learner pods)."""

from __future__ import annotations

NAMESPACED = {
    "pods": {"create", "delete", "list", "watch"},
    "services": {"create", "delete"},
    "secrets": {"create", "delete", "patch"},
    "networkpolicies": {"create", "delete"},
}
CLUSTER_WIDE = {"nodes": {"list"}, "pods": {"list"}}
SHUTDOWN = {"deployments/scale": {"patch"}, "pods": {"list"}}
SHUTDOWN_LEARNERS = {"pods": {"delete", "list"}}
