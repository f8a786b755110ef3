"""The fleet snapshot: every enabled Grove's placement facts, indexed, in process. Pure: no Django.

The chooser decides from this (like kube-scheduler's informer cache) instead of querying the fleet per
decision. Candidates come from set intersections over indexes (role/change kind/isolation buckets,
substrate, platform, platform by position, accelerator API), freshness from a heap of heartbeat times, and the
top of the ranking from a walk in slug order that stops after ``limit`` Groves; only when the best rank
key is short of ``limit`` are all eligible Groves ranked. The ranking is ``selectors``' order of old:
earliest accepted platform in the Grove's order, a unit that fits CPU and memory, the requested
accelerator API, slug. ``selectors`` loads it from the database; ``services`` re-verifies whatever it is
about to persist against the database.
"""
from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

from apps.accelerators.rules import Device, Unit
from apps.placement.requirements import ExecutionRequirement

NO_PLATFORM_RANK = 1000
MAX_GROVE_PLATFORMS = 32  # apps.groves.rules.platforms caps a report at 32
_EMPTY: frozenset = frozenset()


@dataclass(frozen=True, slots=True)
class GroveRecord:
    """One enabled Grove as placement sees it. ``units`` keeps only the (free CPU, free memory) pairs no
    other unit of the Grove dominates: enough to answer "does some unit fit both"."""

    id: object  # uuid.UUID
    slug: str
    substrate: str
    roles: tuple[str, ...]
    platforms: tuple[str, ...]
    isolation_modes: tuple[str, ...]
    change_kinds: tuple[str, ...]
    last_heartbeat_at: datetime | None
    units: tuple[tuple[int, int], ...]
    apis: frozenset[str]
    # As reported, for accelerator admission (Host's claims are read at decision time).
    accelerator_units: tuple[Unit, ...] = ()
    devices: tuple[Device, ...] = ()

    @property
    def heartbeat(self) -> float | None:
        return None if self.last_heartbeat_at is None else self.last_heartbeat_at.timestamp()

    def fits(self, cpu_milli: int, memory_bytes: int) -> bool:
        return any(cpu >= cpu_milli and memory >= memory_bytes for cpu, memory in self.units)


def frontier(units: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """The units not dominated on both free CPU and free memory (most CPU first)."""
    kept: list[tuple[int, int]] = []
    for cpu, memory in sorted(units, key=lambda unit: (-unit[0], -unit[1])):
        if not kept or memory > kept[-1][1]:
            kept.append((cpu, memory))
    return tuple(kept)


def needed_substrate(requirement: ExecutionRequirement) -> set[str]:
    """Substrates that could satisfy the substrate and trust rules at all (empty = none can)."""
    allowed = {"kubernetes", "native"}
    if requirement.substrate:
        allowed &= {requirement.substrate}
    if requirement.trust == "untrusted":
        allowed &= {"kubernetes"}
    if requirement.compatibility.isolation == "host_process":
        allowed &= {"native"}
    return allowed


@dataclass(frozen=True, slots=True)
class Ranked:
    record: GroveRecord
    platform_rank: int
    fits_cpu_memory: bool


@dataclass
class Selection:
    eligible: list[Ranked]  # the best ``limit`` compatible fresh Groves, in chooser order
    others: list[GroveRecord]  # up to ``limit`` fresh Groves failing some rule, by slug
    eligible_total: int  # up to ``cap``
    ineligible_total: int  # up to ``cap``


def _index_keys(record: GroveRecord) -> Iterator[tuple[str, object]]:
    for role in record.roles:
        yield "role", role
        for kind in record.change_kinds:
            for isolation in record.isolation_modes:
                yield "bucket", (role, kind, isolation)
    yield "substrate", record.substrate
    for platform in record.platforms:
        yield "platform", platform
    for position, platform in enumerate(record.platforms[:MAX_GROVE_PLATFORMS]):
        yield "position", (platform, position)
    for api in record.apis:
        yield "api", api


class FleetIndex:
    """Records by slug (unique, and the tie-break order) plus set indexes of slugs. Not thread-safe: the
    caller holds one lock around updates and selections."""

    def __init__(self) -> None:
        self.records: dict[str, GroveRecord] = {}
        self._slug_by_id: dict[object, str] = {}
        self._sorted: list[str] = []
        self._index: dict[tuple[str, object], set[str]] = {}
        self._fresh: set[str] = set()
        self._expiry: list[tuple[float, str]] = []  # (heartbeat, slug), lazily pruned
        self._cutoff = float("-inf")

    def __len__(self) -> int:
        return len(self.records)

    def ids(self) -> set:
        return set(self._slug_by_id)

    # --- updates ---------------------------------------------------------------------------------

    def replace_all(self, records: Iterable[GroveRecord]) -> None:
        self.__init__()
        for record in records:
            self.upsert(record)

    def remove(self, grove_id) -> None:
        slug = self._slug_by_id.pop(grove_id, None)
        if slug is None:
            return
        record = self.records.pop(slug)
        for key in _index_keys(record):
            members = self._index[key]
            members.discard(slug)
            if not members:
                del self._index[key]
        del self._sorted[bisect_left(self._sorted, slug)]
        self._fresh.discard(slug)

    def upsert(self, record: GroveRecord) -> None:
        self.remove(record.id)
        holder = self.records.get(record.slug)
        if holder is not None:  # the slug moved to this Grove; the other's own change is on its way
            self.remove(holder.id)
        self.records[record.slug] = record
        self._slug_by_id[record.id] = record.slug
        for key in _index_keys(record):
            self._index.setdefault(key, set()).add(record.slug)
        insort(self._sorted, record.slug)
        heartbeat = record.heartbeat
        if heartbeat is not None and heartbeat >= self._cutoff:
            self._fresh.add(record.slug)
            heapq.heappush(self._expiry, (heartbeat, record.slug))
            if len(self._expiry) > 4 * len(self.records) + 64:
                self._expiry = [(self.records[slug].heartbeat, slug) for slug in self._fresh]
                heapq.heapify(self._expiry)

    # --- reads -----------------------------------------------------------------------------------

    def fresh(self, cutoff: float) -> set[str]:
        """Slugs whose last heartbeat is at or after ``cutoff`` (amortised: only expiries are touched)."""
        if cutoff < self._cutoff:  # the window grew (a settings change): recompute once
            self._fresh = {slug for slug, record in self.records.items()
                           if record.heartbeat is not None and record.heartbeat >= cutoff}
            self._expiry = [(self.records[slug].heartbeat, slug) for slug in self._fresh]
            heapq.heapify(self._expiry)
        expiry = self._expiry
        while expiry and expiry[0][0] < cutoff:
            _, slug = heapq.heappop(expiry)
            record = self.records.get(slug)
            if record is None or record.heartbeat < cutoff:
                self._fresh.discard(slug)
        self._cutoff = cutoff
        return self._fresh

    def _get(self, kind: str, value) -> set[str] | frozenset:
        return self._index.get((kind, value), _EMPTY)

    def _union(self, kind: str, values: Iterable) -> set[str]:
        out: set[str] = set()
        for value in values:
            out |= self._get(kind, value)
        return out

    def _in_slug_order(self, count: int, limit: int, member, members) -> Iterator[str]:
        """Slugs passing ``member`` in slug order. ``count`` of them exist: when they are dense, walk the
        sorted slugs (about ``limit * fleet / count`` steps); when sparse, sort ``members()``."""
        if count * count >= limit * len(self._sorted):
            return (slug for slug in self._sorted if member(slug))
        return (slug for slug in sorted(members()) if member(slug))

    def select(self, requirement: ExecutionRequirement, *, limit: int, cap: int, cutoff: float,
               role_only: bool = False) -> Selection:
        compat = requirement.compatibility
        fresh = self.fresh(cutoff)
        allowed = frozenset(compat.platform.allowed)
        if role_only:
            eligible = self._get("role", requirement.family) & fresh
        else:
            substrates = needed_substrate(requirement)
            eligible = set(self._get("bucket", (requirement.family, compat.change_kind, compat.isolation)))
            eligible &= fresh
            if len(substrates) == 1:
                eligible &= self._get("substrate", next(iter(substrates)))
            elif not substrates:
                eligible = set()
            if allowed:
                eligible &= self._union("platform", allowed)
        others_count = len(fresh) - len(eligible)
        others = _take(self._in_slug_order(others_count, limit, lambda s: s in fresh and s not in eligible,
                                           lambda: fresh - eligible), limit)
        others = [self.records[slug] for slug in others]
        return Selection(eligible=self._ranked(requirement, eligible, allowed, limit), others=others,
                         eligible_total=min(len(eligible), cap), ineligible_total=min(others_count, cap))

    def _ranked(self, requirement: ExecutionRequirement, eligible: set[str], allowed: frozenset,
                limit: int) -> list[Ranked]:
        cpu, memory = requirement.resources.cpu_milli, requirement.resources.memory_bytes
        api = requirement.accelerators.api if requirement.accelerators and requirement.accelerators.api else ""
        records = self.records
        # The best key any eligible Grove has (its earliest accepted platform position), with a unit that
        # fits and the API, in slug order *is* the top of the ranking; stop after ``limit`` of them.
        best_rank, best = 0, eligible
        if allowed:
            best_rank, best = NO_PLATFORM_RANK, eligible - self._union("platform", allowed)
            for position in range(MAX_GROVE_PLATFORMS):
                at = eligible & self._union("position", [(platform, position) for platform in allowed])
                if at:
                    best_rank, best = position, at
                    break
        if api:
            best = best & self._get("api", api)
        top = _take(self._in_slug_order(len(best), limit,
                                        lambda slug: slug in best and records[slug].fits(cpu, memory),
                                        lambda: best), limit)
        if len(top) >= min(limit, len(eligible)):
            return [Ranked(records[slug], best_rank, True) for slug in top]

        def key(slug: str) -> tuple:
            record = records[slug]
            rank = platform_rank(record.platforms, allowed)
            return rank, not record.fits(cpu, memory), bool(api) and api not in record.apis, slug

        return [Ranked(records[slug], platform_rank(records[slug].platforms, allowed),
                       records[slug].fits(cpu, memory)) for slug in heapq.nsmallest(limit, eligible, key=key)]


def platform_rank(platforms: tuple[str, ...], allowed: frozenset) -> int:
    """Position of the first accepted platform in the Grove's order (0 when any platform will do)."""
    if not allowed:
        return 0
    for rank, platform in enumerate(platforms[:MAX_GROVE_PLATFORMS]):
        if platform in allowed:
            return rank
    return NO_PLATFORM_RANK


def _take(iterator: Iterable[str], limit: int) -> list[str]:
    out = []
    for item in iterator:
        if len(out) >= limit:
            break
        out.append(item)
    return out
