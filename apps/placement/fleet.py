"""The fleet snapshot: every enabled Grove's ``GroveFacts``, indexed, in process. Pure: no Django.

The chooser decides from this (like kube-scheduler's informer cache) instead of querying the fleet per
decision. Each Grove is filed under every key each compatibility rule declares for it (``Rule.keys``),
so what a kind of requirement can ever match (its "shape": what each rule accepts, the accepted
platforms and the accelerator API the sampling reads) comes from set intersections over those indexes,
built from ``rules.RULES`` alone, and is cached until some Grove's facts change; a heartbeat or a new
free capacity changes none of them. Freshness is a stale set kept by a heap of heartbeat times.

A decision samples (``select``): it walks the shape's eligible Groves by the position of the earliest
accepted platform in each Grove's order (the wanted accelerator API first within a position) and, within
that, round a ring of Grove points (a hash of the id) from a start the caller gives (the subject's point),
skipping stale Groves, and stops after ``limit`` Groves with room. ``decide`` scores that sample
(``scoring``). ``snapshot`` loads the index from the database; the writes re-verify against the database
whatever is persisted.
"""
from __future__ import annotations

import heapq
import itertools
from bisect import bisect_left, insort
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from apps.placement import rules
from apps.placement.requirements import ExecutionRequirement
from apps.placement.rules import MAX_GROVE_PLATFORMS, NO_PLATFORM_RANK, GroveFacts, platform_rank
from apps.placement.scoring import ring_point

_EMPTY: frozenset = frozenset()
# Index keys beside the rules': a platform at a position of the Grove's order (a reorder is a facts change),
# an accelerator API.
_POSITION, _API = "rank:position", "rank:api"
# A fleet-facts version: a new number whenever some Grove's indexed facts change (the shape caches clear).
_VERSIONS = itertools.count(1)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A Grove as one decision ranked it: its facts and where it stands (not another Grove description).
    ``select`` keeps the ones it builds while the Grove's facts stand and hands the same object to every
    decision that samples the Grove (immutable, so shared safely)."""

    facts: GroveFacts
    eligible: bool
    platform_rank: int
    fits_cpu_memory: bool


@dataclass
class CandidateSet:
    eligible: list[Candidate]  # the best ``limit`` compatible fresh Groves, in chooser order
    others: list[Candidate]  # up to ``limit`` fresh Groves failing some rule, by slug
    eligible_total: int  # counted up to ``cap``
    ineligible_total: int  # counted up to ``cap``
    cap: int

    @property
    def capped(self) -> bool:
        return self.cap in (self.eligible_total, self.ineligible_total)


def _index_keys(facts: GroveFacts, table: tuple[rules.Rule, ...]) -> Iterator[tuple[str, Hashable]]:
    """Every key the Grove is indexed under: each rule's own keys (``Rule.keys``), then the ranking's."""
    for rule in table:
        for value in rule.keys(facts):
            yield rule.name, value
    for position, platform in enumerate(facts.platforms[:MAX_GROVE_PLATFORMS]):
        yield _POSITION, (platform, position)
    for api in facts.apis:
        yield _API, api


def _accelerator_api(requirement: ExecutionRequirement) -> str:
    return requirement.accelerators.api if requirement.accelerators and requirement.accelerators.api else ""


@dataclass
class _Shape:
    """What a kind of requirement can ever match, fresh or not; cached until the fleet's facts change."""

    eligible: set[str] | frozenset
    others: list[str]  # every other Grove, by slug
    levels: list | None = None  # eligible Groves by platform position, split by the API (``_levels``); on first use


class FleetIndex:
    """Facts by slug (unique), set indexes of slugs (one per rule, from
    ``rules.RULES``, plus the ranking's), the stale set, and a cache of per-requirement-shape candidate
    lists. Not thread-safe: the caller holds one lock around updates and selections."""

    MAX_SHAPES = 256

    def __init__(self) -> None:
        self.records: dict[str, GroveFacts] = {}
        self._slug_by_id: dict[str, str] = {}
        self._keys: dict[str, frozenset] = {}  # each Grove's index keys, as filed
        self._sorted: list[str] = []
        self._ring: dict[str, int] = {}  # slug -> the Grove's point on the sampling ring (from its id)
        self._index: dict[tuple[str, Hashable], set[str]] = {}
        self._stale: set[str] = set()
        self._expiry: list[tuple[float, str]] = []  # (heartbeat, slug) of fresh Groves, lazily pruned
        self._cutoff = float("-inf")
        self._shapes: dict[tuple, _Shape] = {}
        # The shape of a requirement object already asked about (a batch asks once per subject with the
        # same few objects): (requirement, shape) by (id, role_only), the object kept so the id stays its.
        self._shape_of: dict[tuple[int, bool], tuple[ExecutionRequirement, _Shape]] = {}
        self._polls: list[tuple[float, str]] = []  # (last poll, slug) of ready Groves, lazily pruned
        self._rules = rules.RULES  # the table the indexes were built from
        # The eligible candidates ``select`` built, by slug, without room and with room (a decision samples the
        # same Groves as many before it): each stands while its Grove's facts and platform position do.
        self._sampled: tuple[dict[str, Candidate], dict[str, Candidate]] = ({}, {})
        self.version = next(_VERSIONS)

    def __len__(self) -> int:
        return len(self.records)

    def ids(self) -> set[str]:
        return set(self._slug_by_id)

    # --- updates ---------------------------------------------------------------------------------

    def replace_all(self, records: Iterable[GroveFacts]) -> None:
        self.__init__()
        for record in records:
            self.upsert(record, keep_sorted=False)
        self._sorted.sort()

    def remove(self, grove_id: str) -> None:
        slug = self._slug_by_id.pop(grove_id, None)
        if slug is None:
            return
        del self.records[slug]
        del self._ring[slug]
        for kept in self._sampled:
            kept.pop(slug, None)
        for key in self._keys.pop(slug):
            members = self._index[key]
            members.discard(slug)
            if not members:
                del self._index[key]
        del self._sorted[bisect_left(self._sorted, slug)]
        self._stale.discard(slug)
        self._facts_changed()

    def upsert(self, record: GroveFacts, *, keep_sorted: bool = True) -> None:
        keys = frozenset(_index_keys(record, self._rules))
        if self._slug_by_id.get(record.id) == record.slug and self._keys[record.slug] == keys:
            self.records[record.slug] = record  # a heartbeat or new capacity: indexes and shapes stand
        else:
            self.remove(record.id)
            holder = self.records.get(record.slug)
            if holder is not None:  # the slug moved to this Grove; the other's own change is on its way
                self.remove(holder.id)
            self.records[record.slug] = record
            self._slug_by_id[record.id] = record.slug
            self._ring[record.slug] = ring_point(record.id)
            self._keys[record.slug] = keys
            for key in keys:
                self._index.setdefault(key, set()).add(record.slug)
            if keep_sorted:
                insort(self._sorted, record.slug)
            else:
                self._sorted.append(record.slug)
            self._facts_changed()
        if record.ready and record.last_polled_at is not None:
            heapq.heappush(self._polls, (record.last_polled_at.timestamp(), record.slug))
            if len(self._polls) > 4 * len(self.records) + 64:
                self._polls = [(item.last_polled_at.timestamp(), slug) for slug, item in self.records.items()
                               if item.ready and item.last_polled_at is not None]
                heapq.heapify(self._polls)
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

    def loads_changed(self, record: GroveFacts) -> None:
        """The Grove's free counts or claims changed, nothing else (a committed batch's assumed loads): the
        record is replaced; its index keys, ring point, liveness and readiness entries stand."""
        self.records[record.slug] = record

    def _facts_changed(self) -> None:
        self._shapes.clear()
        self._shape_of.clear()
        self.version = next(_VERSIONS)

    def _reindex(self) -> None:
        """``rules.RULES`` is not the table the indexes were built from (a rule registered at run time):
        file every Grove again under the current rules."""
        cutoff = self._cutoff
        self.replace_all(list(self.records.values()))
        self.stale(cutoff)

    def unready(self, cutoff: float) -> list[str]:
        """File again, as not ready, every ready Grove whose last poll is before ``cutoff`` (a timestamp):
        readiness is a fact the rules read (``rules.READINESS``), and it expires with time alone. Amortised
        like ``stale``: only expiries are touched. Returns the slugs that became unready."""
        became = []
        while self._polls and self._polls[0][0] < cutoff:
            _, slug = heapq.heappop(self._polls)
            record = self.records.get(slug)
            if (record is not None and record.ready
                    and (record.last_polled_at is None or record.last_polled_at.timestamp() < cutoff)):
                self.upsert(replace(record, ready=False))
                became.append(slug)
        return became

    # --- reads -----------------------------------------------------------------------------------

    def stale(self, cutoff: float) -> set[str]:
        """Slugs whose last heartbeat is before ``cutoff`` (amortised: only expiries are touched)."""
        if cutoff < self._cutoff:  # the window grew (a settings change): recompute once
            self._stale = {slug for slug, record in self.records.items() if record.stale(cutoff)}
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

    def _get(self, kind: str, value: Hashable) -> set[str] | frozenset:
        return self._index.get((kind, value), _EMPTY)

    def _within(self, members: set[str] | frozenset, kind: str, values: Iterable[Hashable]) -> set[str]:
        """``members`` indexed under any of ``values`` (intersections first: the cost follows ``members``)."""
        out: set[str] = set()
        for value in values:
            out |= members & self._get(kind, value)
        return out

    def _eligible(self, constraints: list[tuple[str, tuple]]) -> set[str] | frozenset:
        """The Groves every constraining rule accepts: a Grove indexed under any accepted value of each
        (the smallest rule's union first, then intersections, so the cost follows the smallest set)."""
        if not constraints:
            return set(self.records)
        sized = sorted(constraints, key=lambda item: sum(len(self._get(item[0], value)) for value in item[1]))
        name, accepted = sized[0]
        eligible: set[str] | frozenset = set().union(*(self._get(name, value) for value in accepted))
        for name, accepted in sized[1:]:
            if not eligible:
                break
            eligible = self._within(eligible, name, accepted)
        return eligible

    def _shape(self, requirement: ExecutionRequirement, role_only: bool) -> _Shape:
        held = self._shape_of.get((id(requirement), role_only))
        if held is not None and held[0] is requirement:
            return held[1]
        shape = self._shape_by_rules(requirement, role_only)
        if len(self._shape_of) >= self.MAX_SHAPES:
            self._shape_of.clear()
        self._shape_of[(id(requirement), role_only)] = (requirement, shape)
        return shape

    def _shape_by_rules(self, requirement: ExecutionRequirement, role_only: bool) -> _Shape:
        # The role-only fallback (shadow mode) still never picks a Grove that would not claim the work.
        table = (rules.ROLE, rules.READINESS) if role_only else self._rules
        # What each rule accepts *is* the shape (with what the ranking reads: platforms and the API).
        accepts = tuple(rule.accepts(requirement) for rule in table)
        allowed = requirement.compatibility.platform.allowed
        api = _accelerator_api(requirement)
        key = (role_only, accepts, allowed, api)
        shape = self._shapes.get(key)
        if shape is not None:
            return shape
        eligible = self._eligible([(rule.name, tuple(accepted)) for rule, accepted in zip(table, accepts, strict=True)
                                   if accepted is not None])
        if len(self._shapes) >= self.MAX_SHAPES:
            self._shapes.clear()
        shape = self._shapes[key] = _Shape(eligible=eligible, others=[s for s in self._sorted if s not in eligible])
        return shape

    def select(self, requirement: ExecutionRequirement, *, limit: int, cap: int, cutoff: float,
               role_only: bool = False, start: int = 0, free: Mapping[str, Sequence] | None = None,
               with_others: bool = True) -> CandidateSet:
        """A sample of ``limit`` fresh eligible Groves (the first that fit CPU and memory in sampling order,
        then, when too few fit, the first that do not), ``limit`` other fresh Groves by slug, and capped
        totals. Sampling order: by the position of the earliest accepted platform in the Grove's order, the
        Groves with the wanted accelerator API first, and within each part round the ring from ``start``
        (the subject's point); a walk starting elsewhere for each subject visits the fleet evenly, the same
        subject always walks it the same way. Per decision this walks the shape's cached levels and stops
        after ``limit`` fits. Room is
        judged on ``free`` (a batch's assumed (unit id, free CPU, free memory) rows by Grove id) where it
        has the Grove, else on the facts' own units. ``with_others`` off skips the sample of non-eligible
        Groves (a decision that builds no verdicts)."""
        if self._rules is not rules.RULES:
            self._reindex()
        stale = self.stale(cutoff)
        shape = self._shape(requirement, role_only)
        eligible_count = len(shape.eligible) - (len(shape.eligible & stale) if stale else 0)
        others = _take((slug for slug in shape.others if slug not in stale), limit) if with_others else []
        cpu, memory = requirement.resources.cpu_milli, requirement.resources.memory_bytes
        fitting: list[Candidate] = []
        short: list[Candidate] = []
        records, sampled = self.records, self._sampled
        free_of = free.get if free else None
        # The room check inline (no callback): this loop runs for every Grove a decision visits.
        for rank, with_api, without_api in self._levels(requirement, shape):
            for points, slugs in (with_api, without_api):
                if not slugs:
                    continue
                at = bisect_left(points, start)
                for index in itertools.chain(range(at, len(slugs)), range(at)):
                    slug = slugs[index]
                    if slug in stale:
                        continue
                    facts = records[slug]
                    rows = free_of(facts.id) if free_of is not None else None
                    room = False
                    if rows is None:
                        for unit_cpu, unit_memory in facts.units:  # ``GroveFacts.fits``
                            if unit_cpu >= cpu and unit_memory >= memory:
                                room = True
                                break
                    else:
                        for row in rows:
                            if row[1] >= cpu and row[2] >= memory:
                                room = True
                                break
                    if room or len(short) < limit:
                        kept = sampled[room]
                        candidate = kept.get(slug)
                        if candidate is None or candidate.facts is not facts or candidate.platform_rank != rank:
                            candidate = kept[slug] = Candidate(facts, True, rank, room)
                        if not room:
                            short.append(candidate)
                            continue
                        fitting.append(candidate)
                        if len(fitting) >= limit:
                            return self._selected(fitting, short, others, eligible_count, stale, limit, cap)
        return self._selected(fitting, short, others, eligible_count, stale, limit, cap)

    def _selected(self, fitting: list[Candidate], short: list[Candidate], others: list[str], eligible_count: int,
                  stale: set[str], limit: int, cap: int) -> CandidateSet:
        return CandidateSet(
            eligible=fitting if len(fitting) == limit else (fitting + short)[:limit],
            others=[Candidate(self.records[slug], False, NO_PLATFORM_RANK, False) for slug in others],
            eligible_total=min(eligible_count, cap),
            ineligible_total=min(len(self.records) - len(stale) - eligible_count, cap), cap=cap)

    def _levels(self, requirement: ExecutionRequirement, shape: _Shape) -> list[tuple[int, tuple, tuple]]:
        """(platform position, the Groves with the wanted API, the others) per level, each part in ring order
        as (ring points, slugs): the walk bisects the plain points for the subject's (the first point at or
        after it, as bisecting (point, slug) pairs for (start, "") found). Precomputed once per shape (the
        API is a preference the walk reads after the position)."""
        if shape.levels is None:
            api = _accelerator_api(requirement)
            allowed = frozenset(requirement.compatibility.platform.allowed)
            levels: dict[int, tuple[list, list]] = {}
            for slug in shape.eligible:
                record = self.records[slug]
                level = levels.setdefault(platform_rank(record.platforms, allowed), ([], []))
                level[0 if not api or api in record.apis else 1].append((self._ring[slug], slug))
            shape.levels = [(rank, _ring_order(levels[rank][0]), _ring_order(levels[rank][1]))
                            for rank in sorted(levels)]
        return shape.levels


def _ring_order(members: list[tuple[int, str]]) -> tuple[list[int], list[str]]:
    """(ring points, slugs) of one part of a level, sorted by point (then slug)."""
    members.sort()
    return [point for point, _slug in members], [slug for _point, slug in members]


def _take(iterator: Iterable[str], limit: int) -> list[str]:
    out = []
    for item in iterator:
        if len(out) >= limit:
            break
        out.append(item)
    return out
