"""Teams' quotas: what each team uses, its nominal quota, and how far it may borrow.

A team may always use its nominal quota. Beyond it, it borrows other teams' idle quota, up
to its borrowing limit, and only while the teams together stay within the sum of their
nominal quotas (what one team borrows is what another leaves idle). Resources are keyed
"gpus:<product>", "cpus" (millicpus), "memory" (bytes) and "jobs" (concurrent jobs).
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lifecycle_manager.scheduler.model import Gang, Quota, RunningJob, Team

JOBS = "jobs"
CPUS = "cpus"
MEMORY = "memory"

Need = tuple[tuple[str, int], ...]


def gpu_key(product: str | None) -> str:
    return f"gpus:{product}"


def taken_from(gpus: int, product: str | None) -> str:
    """The resource a job is preempted from, and preempts from: its GPU product, or CPUs
    for a CPU-only job."""
    return gpu_key(product) if gpus else CPUS


@functools.lru_cache(maxsize=4096)
def need_of(gang: Gang, product: str | None) -> Need:
    """What a job placed on `product` counts against its team's quota."""
    need: list[tuple[str, int]] = [(JOBS, 1)]
    if gang.gpus:
        need.append((gpu_key(product), gang.learners * gang.gpus))
    if gang.millicpus:
        need.append((CPUS, gang.learners * gang.millicpus))
    if gang.memory:
        need.append((MEMORY, gang.learners * gang.memory))
    return tuple(need)


def _amounts(quota: Quota) -> dict[str, float]:
    amounts: dict[str, float] = {gpu_key(p): n for p, n in quota.gpus.items()}
    for key, value in ((CPUS, quota.millicpus), (MEMORY, quota.memory), (JOBS, quota.jobs)):
        amounts[key] = math.inf if value is None else value
    return amounts


@dataclass(frozen=True, slots=True)
class QuotaBlock:
    """Why a team may not take a need now: `resource` would go past the team's ceiling
    (nominal + borrowing limit), or (`no_idle_quota`) past what other teams leave idle."""

    team: str
    resource: str
    need: int
    used: float
    nominal: float
    ceiling: float
    no_idle_quota: bool


class TeamAccount:
    def __init__(self, team: Team) -> None:
        self.team = team
        self.nominal = _amounts(team.nominal)
        borrowing = _amounts(team.borrowing_limit)
        self.ceiling = {key: value + borrowing.get(key, 0) for key, value in self.nominal.items()}
        for key, value in borrowing.items():
            self.ceiling.setdefault(key, value)
        self.used: dict[str, float] = {}
        self.version = 0  # counts changes of `used`, so that what depends on it can be kept

    def copy(self) -> TeamAccount:
        twin = copy.copy(self)
        twin.used = dict(self.used)
        return twin

    def nominal_of(self, key: str) -> float:
        return self.nominal.get(key, 0)

    def ceiling_of(self, key: str) -> float:
        return self.ceiling.get(key, 0)

    def within_nominal(self, need: Need) -> bool:
        used, nominal = self.used, self.nominal
        return all(used.get(k, 0) + a <= nominal.get(k, 0) for k, a in need)

    def borrowing(self, key: str) -> bool:
        return self.used.get(key, 0) > self.nominal.get(key, 0)


class QuotaLedger:
    """Every team's usage, changed as a pass admits (`add`) or plans to free (`remove`)."""

    def __init__(self, teams: Iterable[Team], running: Iterable[RunningJob]) -> None:
        self.accounts = {t.name: TeamAccount(t) for t in teams}
        self.cohort_nominal: dict[str, float] = {}
        for account in self.accounts.values():
            for key, value in account.nominal.items():
                self.cohort_nominal[key] = self.cohort_nominal.get(key, 0) + value
        self.cohort_used: dict[str, float] = {}
        # per team and resource: what its claiming jobs need, see `claim`
        self.claims: dict[str, dict[str, float]] = {}
        # the cluster's amount of each resource: borrowing past what it has beside the
        # claims would take the claimed room itself
        self.capacity: Mapping[str, float] = {}
        used: dict[str, dict[str, int]] = {}  # per team, summed before it is added
        for job in running:
            if job.team in self.accounts:
                of_team = used.setdefault(job.team, {})
                for key, amount in need_of(job.gang, job.gpu_product):
                    of_team[key] = of_team.get(key, 0) + amount
        for team, amounts in used.items():
            self.add(team, tuple(amounts.items()))

    def copy(self) -> QuotaLedger:
        """A ledger that changes apart from this one from now on."""
        twin = copy.copy(self)
        twin.accounts = {name: account.copy() for name, account in self.accounts.items()}
        twin.cohort_used = dict(self.cohort_used)
        return twin

    def add(self, team: str, need: Need, sign: int = 1) -> None:
        account = self.accounts[team]
        account.version += 1
        used = account.used
        cohort = self.cohort_used
        for key, amount in need:
            used[key] = used.get(key, 0) + sign * amount
            cohort[key] = cohort.get(key, 0) + sign * amount

    def remove(self, team: str, need: Need) -> None:
        self.add(team, need, -1)

    def block(self, team: str, need: Need) -> QuotaBlock | None:
        """None if `team` may take `need` now, else the first resource that stops it."""
        account = self.accounts[team]
        used, ceiling = account.used, account.ceiling
        for key, amount in need:
            after = used.get(key, 0) + amount
            limit = ceiling.get(key, 0)
            # the ceiling is never below the nominal quota, so past it means borrowing
            # beyond the limit; the cohort's total stops a team borrowing what no one lent
            cohort = self.cohort_used.get(key, 0) + amount
            lendable = self.cohort_nominal.get(key, 0)
            if self.claims and after > account.nominal.get(key, 0):
                cohort += self._claimed_by_others(team, key)
                lendable = min(lendable, self.capacity.get(key, lendable))
            if after > limit or cohort > lendable:
                return QuotaBlock(
                    team,
                    key,
                    amount,
                    used.get(key, 0),
                    account.nominal.get(key, 0),
                    limit,
                    no_idle_quota=after <= limit,
                )
        return None

    def claim(self, team: str, need: Need) -> None:
        """Keep from other teams' borrowing what of `need` the team's nominal quota holds
        and the team leaves unused (however much it uses now: a plan that frees some
        weighs the claim on what is left), for a job of the team that waits."""
        nominal = self.accounts[team].nominal
        claims = self.claims.setdefault(team, {})
        for key, amount in need:
            if amount <= nominal.get(key, 0):
                claims[key] = claims.get(key, 0) + amount

    def _claimed_by_others(self, team: str, key: str) -> float:
        kept = 0.0
        for name, claims in self.claims.items():
            claimed = claims.get(key)
            if claimed and name != team:
                account = self.accounts[name]
                kept += max(0.0, min(claimed, account.nominal_of(key) - account.used.get(key, 0)))
        return kept

    def beyond_ceiling(self, team: str, need: Need) -> str | None:
        """The resource `need` alone exceeds the team's ceiling in (it can never run)."""
        ceiling = self.accounts[team].ceiling
        for key, amount in need:
            if amount > ceiling.get(key, 0):
                return key
        return None

    def violations(self) -> list[str]:
        """Teams past their ceiling and resources past the cohort's nominal total."""
        found = [
            f"team {name} uses {used} {key}, above its ceiling {account.ceiling_of(key)}"
            for name, account in self.accounts.items()
            for key, used in account.used.items()
            if used > account.ceiling_of(key)
        ]
        found += [
            f"teams use {used} {key} together, above their nominal total "
            f"{self.cohort_nominal.get(key, 0)}"
            for key, used in self.cohort_used.items()
            if used > self.cohort_nominal.get(key, 0)
        ]
        return found


def idle_quota_kept(ledger: QuotaLedger, team: str, resource: str, need: int) -> bool:
    """Whether the idle quota of `resource` is kept for a job of `team` needing `need` of
    it: it is, if what other teams hold within their nominal quotas leaves room for it
    (what they borrow beyond, they give back to it)."""
    kept = sum(
        min(account.used.get(resource, 0), account.nominal_of(resource))
        for name, account in ledger.accounts.items()
        if name != team
    )
    used = ledger.accounts[team].used.get(resource, 0)
    return used + need <= ledger.cohort_nominal.get(resource, 0) - kept


def products_by_headroom(account: TeamAccount, products: Iterable[str | None]) -> list[str | None]:
    """GPU products in the order a job that names none should try them: most nominal
    quota left first (no borrowing needed), then most room up to the ceiling."""

    def headroom(product: str | None) -> tuple[float, float, str]:
        key = gpu_key(product)
        used = account.used.get(key, 0)
        return (used - account.nominal_of(key), used - account.ceiling_of(key), str(product))

    return sorted(products, key=headroom)
