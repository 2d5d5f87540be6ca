"""The cluster's nodes as the lifecycle manager last saw them, shared through Redis.

The lifecycle manager asks its backend for the nodes at every scheduling pass, and at
least every `REFRESH_S` seconds in its sweep, and publishes them here (so a platform
restarted with other capacity, or a cluster that gained a node, is not judged by what was
published before); the API reads them to refuse, at submission, a job whose learner asks
for more than any node has, and to show `GET /v2/cluster`. Amounts are integers: CPUs in
millicpus, memory in bytes. A node's GPUs are all of one product; `pretend_gpus` marks a
local node whose GPUs are configured (`DLAAS_LOCAL_GPUS`) rather than present, so that
scheduling can be tried on a laptop.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from redis import Redis
from redis.asyncio import Redis as AsyncRedis

NODES_KEY = "dlaas:cluster-nodes"
FRESH_KEY = "dlaas:cluster-nodes-fresh"  # exists while the published nodes are recent
REFRESH_S = 10
# Set in the environment of a learner that asked for this many GPUs on a node whose GPUs are
# pretend: the program runs on CPU, and the runner says so in the learner's log.
PRETEND_GPUS_ENV = "DLAAS_PRETEND_GPUS"


@dataclass(frozen=True)
class NodeCapacity:
    name: str
    gpus: int = 0
    gpu_product: str | None = None
    millicpus: int = 0
    memory: int = 0
    pretend_gpus: bool = False


def encode_nodes(nodes: Sequence[NodeCapacity]) -> str:
    return json.dumps([asdict(node) for node in nodes])


def decode_nodes(raw: str | bytes | None) -> list[NodeCapacity] | None:
    """The nodes a published value names; None when nothing (valid) was published."""
    if raw is None:
        return None
    try:
        items: Any = json.loads(raw)
        return [NodeCapacity(**item) for item in items]
    except (ValueError, TypeError):
        return None


def publish_nodes(redis: Redis, nodes: Sequence[NodeCapacity]) -> None:
    redis.set(NODES_KEY, encode_nodes(nodes))


async def apublish_nodes(redis: AsyncRedis, nodes: Sequence[NodeCapacity]) -> None:
    await redis.set(NODES_KEY, encode_nodes(nodes))
    await redis.set(FRESH_KEY, "1", ex=REFRESH_S)


async def aclaim_refresh(redis: AsyncRedis) -> bool:
    """Whether the caller should publish the nodes again: true for one caller at a time,
    once the last publication is `REFRESH_S` old."""
    return bool(await redis.set(FRESH_KEY, "1", ex=REFRESH_S, nx=True))


async def anodes(redis: AsyncRedis) -> list[NodeCapacity] | None:
    return decode_nodes(await redis.get(NODES_KEY))
