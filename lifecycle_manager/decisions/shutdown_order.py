"""The order in which dlaas on Kubernetes stops (`helm uninstall`), and when each step is over:
pure functions over the pods a step waits for.

```
 1. workers   the lifecycle manager's workers are scaled to 0 and waited for: nothing
              creates a learner any more (a worker finishes the task it holds first)
 2. learners  every learner pod still running is deleted with its own grace period and
              waited for: its program is sent SIGTERM and checkpoints, its shipper stores
              the checkpoint through the API's object gateway and publishes the exit
 3. monitor   the monitor is scaled to 0 and waited for: it handles the learners' last
              events before it exits, so each job is recorded as interrupted
```

All the while the API, the object storage, Redis and the database run; Helm deletes them
only after this. An interrupted job uses no restart: the next install's reconcile resumes it
from the checkpoint its learners stored on the way out. A learner pod that already finished
(Succeeded, Failed) is left as it is and not waited for.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum


class Stage(StrEnum):
    WORKERS = "workers"
    LEARNERS = "learners"
    MONITOR = "monitor"


ORDER = (Stage.WORKERS, Stage.LEARNERS, Stage.MONITOR)
# The stages that scale a Deployment to 0 (whose controller then deletes its pods); the
# others delete their pods themselves.
SCALED = frozenset({Stage.WORKERS, Stage.MONITOR})
_KEY = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


@dataclass(frozen=True)
class PodView:
    name: str
    labels: Mapping[str, str]
    terminating: bool  # deleted, within its grace period
    finished: bool  # Succeeded or Failed: nothing runs in it


@dataclass(frozen=True)
class Step:
    """What a stage does next with its pods as they stand."""

    delete: tuple[str, ...] = ()  # pods to delete now (with their own grace period)
    waiting_for: tuple[str, ...] = ()  # pods still running or stopping
    done: bool = False  # none left: the next stage may begin


def parse_selector(selector: str) -> dict[str, str]:
    """`k=v,k2=v2` (equality only, as the chart passes them) as a dict."""
    labels = {}
    for term in filter(None, (part.strip() for part in selector.split(","))):
        key, sep, value = (part.strip() for part in term.partition("="))
        if not sep or not _KEY.match(key) or not _VALUE.match(value):
            raise ValueError(f"{term!r} is not a key=value label selector term")
        labels[key] = value
    return labels


def selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def next_step(stage: Stage, pods: Sequence[PodView], selector: Mapping[str, str]) -> Step:
    """The stage's next step, given the pods listed in its namespace (filtered here by
    `selector` too: a server's selector is not taken on trust)."""
    live = [pod for pod in pods if selects(selector, pod.labels) and not pod.finished]
    if not live:
        return Step(done=True)
    waiting = tuple(sorted(pod.name for pod in live))
    if stage in SCALED:  # the Deployment's controller deletes them
        return Step(waiting_for=waiting)
    fresh = tuple(sorted(pod.name for pod in live if not pod.terminating))
    return Step(delete=fresh, waiting_for=waiting)
