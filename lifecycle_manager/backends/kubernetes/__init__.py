"""The `kubernetes` cluster backend; the only package that touches the Kubernetes client.

- `manifests`: the job's objects (Secret, headless Service, learner pods) as dicts
- `admission`: whether the nodes can hold a whole gang
- `client`: the API client, with timeouts, brief retries and error classes
- `backend`: `KubernetesBackend`, the `ClusterBackend` the lifecycle manager uses
- `pod_status`, `pod_events`: a pod's status read as learner events and job notices
- `watch`: the list-then-watch loop the pod watcher runs
- `pod_watcher`: that process (`python -m lifecycle_manager.backends.kubernetes.pod_watcher`),
  which feeds what it sees to the monitor and the job rows
- `shutdown`: the chart's pre-delete hook
  (`python -m lifecycle_manager.backends.kubernetes.shutdown`), which stops the workers, then
  the learners, then the monitor before Helm deletes the rest
"""

from lifecycle_manager.backends.kubernetes.backend import KubernetesBackend

__all__ = ["KubernetesBackend"]
