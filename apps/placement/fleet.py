"""The fleet snapshot: every enabled Grove's placement facts, indexed, in process. Pure: no Django.

The chooser decides from this (like kube-scheduler's informer cache) instead of querying the fleet per
decision. What a kind of requirement can ever match (its "shape": role, change kind, isolation, trust,
accepted platforms, accelerator API) comes from set intersections over indexes and is cached as slug-
ordered lists until some Grove's facts change; a heartbeat or a new free capacity changes none of them.
Freshness is a stale set kept by a heap of heartbeat times. A decision then walks the cached lists,
skipping stale Groves, and stops after ``limit`` hits; only when the best rank level holds fewer than
``limit`` fresh Groves that fit does it rank every eligible Grove. The order is the chooser's: earliest
accepted platform in the Grove's order, a unit that fits CPU and memory, the requested accelerator API,
slug. ``selectors`` loads the snapshot from the database; ``services`` re-verifies whatever it is about
to persist against the database.
"""
from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

from apps.accelerators.rules import Device, Unit
from apps.placement.requirements import ExecutionRequirement
from apps.placement.rules import GroveFacts

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
    facts: GroveFacts = field(init=False, compare=False)  # what the rules read, built once per load

    def __post_init__(self) -> None:
        object.__setattr__(self, "facts", GroveFacts(
            id=str(self.id), slug=self.slug, substrate=self.substrate, roles=self.roles, platforms=self.platforms,
            isolation_modes=self.isolation_modes, change_kinds=self.change_kinds))

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


def _static(record: GroveRecord) -> tuple:
    """The facts the indexes hold (a heartbeat or a new free capacity changes none of them)."""
    return (record.slug, record.substrate, record.roles, record.platforms, record.isolation_modes,
            record.change_kinds, record.apis)


@dataclass
class _Shape:
    """What a kind of requirement can ever match, fresh or not; cached until the fleet's facts change."""

    eligible: set[str] | frozenset
    others: list[str]  # every other Grove, by slug
    best_rank: int  # the earliest accepted platform position any eligible Grove has
    best: list[str]  # eligible Groves at that position (with the API when one is wanted), by slug


class FleetIndex:
    """Records by slug (unique, and the tie-break order), set indexes of slugs, the stale set, and a cache
    of per-requirement-shape candidate lists. Not thread-safe: the caller holds one lock around updates
    and selections."""

    MAX_SHAPES = 256

    def __init__(self) -> None:
        self.records: dict[str, GroveRecord] = {}
        self._slug_by_id: dict[object, str] = {}
        self._sorted: list[str] = []
        self._index: dict[tuple[str, object], set[str]] = {}
        self._stale: set[str] = set()
        self._expiry: list[tuple[float, str]] = []  # (heartbeat, slug) of fresh Groves, lazily pruned
        self._cutoff = float("-inf")
        self._shapes: dict[tuple, _Shape] = {}

    def __len__(self) -> int:
        return len(self.records)

    def ids(self) -> set:
        return set(self._slug_by_id)

    # --- updates ---------------------------------------------------------------------------------

    def replace_all(self, records: Iterable[GroveRecord]) -> None:
        self.__init__()
        for record in records:
            self.upsert(record, keep_sorted=False)
        self._sorted.sort()

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
        self._stale.discard(slug)
        self._shapes.clear()

    def upsert(self, record: GroveRecord, *, keep_sorted: bool = True) -> None:
        old_slug = self._slug_by_id.get(record.id)
        old = self.records.get(old_slug) if old_slug is not None else None
        if old is not None and _static(old) == _static(record):
            self.records[record.slug] = record  # a heartbeat or new capacity: indexes and shapes stand
        else:
            self.remove(record.id)
            holder = self.records.get(record.slug)
            if holder is not None:  # the slug moved to this Grove; the other's own change is on its way
                self.remove(holder.id)
            self.records[record.slug] = record
            self._slug_by_id[record.id] = record.slug
            for key in _index_keys(record):
                self._index.setdefault(key, set()).add(record.slug)
            if keep_sorted:
                insort(self._sorted, record.slug)
            else:
                self._sorted.append(record.slug)
            self._shapes.clear()
        heartbeat = record.heartbeat
        if heartbeat is not None and heartbeat >= self._cutoff:
            self._stale.discard(record.slug)
            heapq.heappush(self._expiry, (heartbeat, record.slug))
            if len(self._expiry) > 4 * len(self.records) + 64:
                self._expiry = [(self.records[slug].heartbeat, slug) for slug in self.records
                                if slug not in self._stale]
                heapq.heapify(self._expiry)
        else:
            self._stale.add(record.slug)

    # --- reads -----------------------------------------------------------------------------------

    def stale(self, cutoff: float) -> set[str]:
        """Slugs whose last heartbeat is before ``cutoff`` (amortised: only expiries are touched)."""
        if cutoff < self._cutoff:  # the window grew (a settings change): recompute once
            self._stale = {slug for slug, record in self.records.items()
                           if record.heartbeat is None or record.heartbeat < cutoff}
            self._expiry = [(self.records[slug].heartbeat, slug) for slug in self.records if slug not in self._stale]
            heapq.heapify(self._expiry)
        expiry = self._expiry
        while expiry and expiry[0][0] < cutoff:
            _, slug = heapq.heappop(expiry)
            record = self.records.get(slug)
            if record is not None and record.heartbeat < cutoff:
                self._stale.add(slug)
        self._cutoff = cutoff
        return self._stale

    def _get(self, kind: str, value) -> set[str] | frozenset:
        return self._index.get((kind, value), _EMPTY)

    def _within(self, members: set[str] | frozenset, kind: str, values: Iterable) -> set[str]:
        """``members`` indexed under any of ``values`` (intersections first: the cost follows ``members``)."""
        out: set[str] = set()
        for value in values:
            out |= members & self._get(kind, value)
        return out

    def _shape(self, requirement: ExecutionRequirement, role_only: bool) -> _Shape:
        compat = requirement.compatibility
        allowed = frozenset(compat.platform.allowed)
        api = requirement.accelerators.api if requirement.accelerators and requirement.accelerators.api else ""
        key = (requirement.family, role_only, compat.change_kind, compat.isolation, requirement.trust, allowed, api)
        shape = self._shapes.get(key)
        if shape is not None:
            return shape
        if role_only:
            eligible = self._get("role", requirement.family)
        else:
            substrates = needed_substrate(requirement)
            eligible = self._get("bucket", (requirement.family, compat.change_kind, compat.isolation))
            if len(substrates) == 1:
                eligible = eligible & self._get("substrate", next(iter(substrates)))
            elif not substrates:
                eligible = _EMPTY
            if allowed:
                eligible = self._within(eligible, "platform", allowed)
        best_rank, best = 0, eligible
        if allowed:
            best_rank, best = NO_PLATFORM_RANK, eligible - self._within(eligible, "platform", allowed)
            for position in range(MAX_GROVE_PLATFORMS):
                at = self._within(eligible, "position", [(platform, position) for platform in allowed])
                if at:
                    best_rank, best = position, at
                    break
        if api:
            best = best & self._get("api", api)
        if len(self._shapes) >= self.MAX_SHAPES:
            self._shapes.clear()
        shape = self._shapes[key] = _Shape(eligible=eligible, others=[s for s in self._sorted if s not in eligible],
                                           best_rank=best_rank, best=sorted(best))
        return shape

    def select(self, requirement: ExecutionRequirement, *, limit: int, cap: int, cutoff: float,
               role_only: bool = False) -> Selection:
        """The top ``limit`` fresh eligible Groves, ``limit`` other fresh Groves by slug, and capped totals.
        Per decision this walks the shape's cached lists and stops after ``limit`` hits; only a shape whose
        best rank level holds fewer than ``limit`` fresh Groves that fit ranks every eligible Grove."""
        stale = self.stale(cutoff)
        shape = self._shape(requirement, role_only)
        eligible_count = len(shape.eligible) - (len(shape.eligible & stale) if stale else 0)
        others = _take((slug for slug in shape.others if slug not in stale), limit)
        return Selection(
            eligible=self._ranked(requirement, shape, stale, eligible_count, limit),
            others=[self.records[slug] for slug in others], eligible_total=min(eligible_count, cap),
            ineligible_total=min(len(self.records) - len(stale) - eligible_count, cap))

    def _ranked(self, requirement: ExecutionRequirement, shape: _Shape, stale: set[str], eligible_count: int,
                limit: int) -> list[Ranked]:
        cpu, memory = requirement.resources.cpu_milli, requirement.resources.memory_bytes
        api = requirement.accelerators.api if requirement.accelerators and requirement.accelerators.api else ""
        records = self.records
        # The best key any eligible Grove can have (its earliest accepted platform position, a unit that fits,
        # the API), in slug order, *is* the top of the ranking: stop after ``limit`` of them.
        top = _take((slug for slug in shape.best if slug not in stale and records[slug].fits(cpu, memory)), limit)
        if len(top) >= min(limit, eligible_count):
            return [Ranked(records[slug], shape.best_rank, True) for slug in top]
        allowed = frozenset(requirement.compatibility.platform.allowed)

        def key(slug: str) -> tuple:
            record = records[slug]
            return (platform_rank(record.platforms, allowed), not record.fits(cpu, memory),
                    bool(api) and api not in record.apis, slug)

        return [Ranked(records[slug], platform_rank(records[slug].platforms, allowed),
                       records[slug].fits(cpu, memory)) for slug in heapq.nsmallest(limit, shape.eligible - stale,
                                                                                      key=key)]


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
