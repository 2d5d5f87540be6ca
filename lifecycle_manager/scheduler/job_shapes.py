"""What a pass works out once per distinct gang, and once per team and gang.

Thousands of pending jobs share a few dozen shapes. Everything about a job that depends
only on its gang (the products it may use, what it counts against quota, whether any node
fits it, where a placement already failed) or on its team and gang (its quota ceiling, the
reasons shown for a quota block) is kept here, so each job costs one dictionary lookup for
all of it. Room only shrinks and usage only grows while a pass runs, so a placement that
failed stays failed for the pass, and a quota block stays valid until the team admits.
"""

from __future__ import annotations

from collections.abc import Sequence

from lifecycle_manager.scheduler.decisions import WaitCause
from lifecycle_manager.scheduler.model import Gang
from lifecycle_manager.scheduler.placement import candidate_products
from lifecycle_manager.scheduler.quota import (
    CPUS,
    MEMORY,
    Need,
    QuotaBlock,
    QuotaLedger,
    gpu_key,
    need_of,
)

_FIELD_OF_RESOURCE = {CPUS: "cpus", MEMORY: "memory"}


class GangFacts:
    __slots__ = (
        "always_needs",
        "amount",
        "gang",
        "needs",
        "no_room",
        "pools",
        "products",
        "refusal",
    )

    def __init__(
        self, gang: Gang, gpu_products: Sequence[str | None], refusal: tuple[str, str] | None
    ):
        self.gang = gang
        self.products = candidate_products(gang, gpu_products)
        self.needs: dict[str | None, Need] = {p: need_of(gang, p) for p in self.products}
        # the resources it needs whichever product it runs on
        self.always_needs = (
            frozenset.intersection(
                *(frozenset(key for key, _ in need) for need in self.needs.values())
            )
            if self.needs
            else frozenset()
        )
        self.refusal = refusal  # (field, reason) when no node could ever hold it
        self.no_room: set[tuple[str | None, bool]] = set()  # (product, in held room too)
        # for estimated starts: the pool of room it waits in per product, and how much
        self.pools = {p: gpu_key(p) if gang.gpus else CPUS for p in self.products}
        self.amount = gang.learners * (gang.gpus or gang.millicpus)


class TeamShape:
    """A gang as one team asks for it. `quota_wait` is how the last such job stayed
    queued for quota: (the team's admissions then, cause, reason, product); the next one
    waits the same way until the team admits again. `room_wait` is how the last one
    stayed queued for room: (the pass's count of changes then, its priority, cause,
    reason, product); the next one of that priority waits the same way until anything
    changes, unless it is short enough to backfill."""

    __slots__ = ("blocks", "facts", "never", "quota_wait", "reasons", "room_wait")

    def __init__(self, team: str, facts: GangFacts, ledger: QuotaLedger):
        self.facts = facts
        # (field, reason) when no such job can ever run: too big for any node, or for the
        # team's quota
        self.never = facts.refusal or _beyond_ceiling(team, facts, ledger)
        # product: (the admissions it holds for, the block or None), see _Pass._quota_block
        self.blocks: dict[str | None, tuple[int, QuotaBlock | None]] = {}
        self.reasons: dict[int, str] = {}  # id of a block: its reason
        self.quota_wait: tuple[int, WaitCause, str, str | None] | None = None
        self.room_wait: tuple[int, int, WaitCause, str, str | None] | None = None


def _beyond_ceiling(team: str, facts: GangFacts, ledger: QuotaLedger) -> tuple[str, str] | None:
    """A gang that alone exceeds the team's nominal quota plus borrowing limit on every
    product it could use can never run."""
    resources = []
    for product in facts.products:
        resource = ledger.beyond_ceiling(team, facts.needs[product])
        if resource is None:
            return None
        resources.append(resource)
    if not resources:
        return None
    resource = resources[0]
    field = _FIELD_OF_RESOURCE.get(resource, "gpus" if resource.startswith("gpus") else "team")
    ceiling = ledger.accounts[team].ceiling_of(resource)
    return field, (
        f"needs more {resource.removeprefix('gpus:')} than team {team} may ever use "
        f"({ceiling:g}: its nominal quota plus borrowing limit)"
    )
