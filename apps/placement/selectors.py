"""Reads for placement: candidate Groves and stored placements.

The candidate query does the selective work in PostgreSQL and returns a bounded number of rows whatever
the fleet size (see ``candidates``); Python only ever checks and ranks those.
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import QuerySet
from django.utils import timezone

from apps.groves.models import Grove, PlacementUnit
from apps.placement.models import ExecutionPlacement
from apps.placement.requirements import ExecutionRequirement
from apps.placement.rules import GroveFacts

NO_PLATFORM_RANK = 1000
MAX_GROVE_PLATFORMS = 32  # apps.groves.rules.platforms caps a report at 32
FACT_FIELDS = ("id", "slug", "substrate", "roles", "platforms", "isolation_modes", "change_kinds", "enabled",
               "last_heartbeat_at")


def facts(grove: Grove) -> GroveFacts:
    return GroveFacts(id=str(grove.id), slug=grove.slug, substrate=grove.substrate, roles=tuple(grove.roles),
                      platforms=tuple(grove.platforms), isolation_modes=tuple(grove.isolation_modes),
                      change_kinds=tuple(grove.change_kinds))


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


@dataclass
class Candidate:
    """A fresh Grove as the candidate query returns it (duck-types the Grove fields that ``facts`` reads)."""

    id: uuid.UUID
    slug: str
    substrate: str
    roles: list
    platforms: list
    isolation_modes: list
    change_kinds: list
    last_heartbeat_at: datetime
    eligible: bool
    platform_rank: int
    fits_cpu_memory: bool

    def to_grove(self) -> Grove:
        """The model instance (other fields load on access) for results and the placement's foreign key."""
        known = {"id": self.id, "slug": self.slug, "substrate": self.substrate, "roles": self.roles,
                 "platforms": self.platforms, "isolation_modes": self.isolation_modes,
                 "change_kinds": self.change_kinds, "last_heartbeat_at": self.last_heartbeat_at, "enabled": True}
        # from_db takes values in the model's field order when some fields are deferred.
        names = [f.attname for f in Grove._meta.concrete_fields if f.attname in known]
        return Grove.from_db("default", names, [known[name] for name in names])


@dataclass
class CandidateSet:
    eligible: list[Candidate]  # the best ``limit`` compatible Groves, in chooser order
    others: list[Candidate]  # up to ``limit`` fresh Groves failing some rule, by slug
    eligible_total: int  # counted up to COUNT_CAP
    ineligible_total: int  # counted up to COUNT_CAP

    @property
    def capped(self) -> bool:
        return COUNT_CAP in (self.eligible_total, self.ineligible_total)


# Totals in a decision are exact up to this many Groves ("200+" beyond): counting every eligible Grove of
# a large fleet would make each decision's cost grow with the fleet.
COUNT_CAP = 200
_CAP = "EXISTS (SELECT 1 FROM groves_grovecapability c WHERE c.grove_id = g.id AND c.kind = '{kind}' AND {test})"
_COLUMNS = "g.id, g.slug, g.substrate, g.roles, g.platforms, g.isolation_modes, g.change_kinds, g.last_heartbeat_at"


def _json(value):
    return json.loads(value) if isinstance(value, str | bytes) else value


def _rows_to_candidates(rows) -> list[Candidate]:
    out = []
    for eligible, grove_id, slug, substrate, roles, platforms, isolation, kinds, heartbeat, prank, fit in rows:
        out.append(Candidate(id=grove_id, slug=slug, substrate=substrate, roles=_json(roles),
                             platforms=_json(platforms), isolation_modes=_json(isolation), change_kinds=_json(kinds),
                             last_heartbeat_at=heartbeat, eligible=eligible,
                             platform_rank=NO_PLATFORM_RANK if prank is None else prank, fits_cpu_memory=fit))
    return out


def candidates(requirement: ExecutionRequirement, *, limit: int, role_only: bool = False) -> CandidateSet:
    """The ``limit`` best eligible Groves in chooser order, a sample of the others, and capped totals.

    The compatibility rules are jsonb containment tests on the Grove's own role, change-kind, isolation
    and platform lists plus the substrate column (no per-row subplans). The first round trip asks only for
    Groves with the best possible rank key (first platform accepted, a unit that fits, the accelerator
    API when one is wanted) in slug order: PostgreSQL walks the slug index and stops after ``limit``
    rows, and those rows *are* the top of the ranking. Only when fewer exist does a second query rank
    every eligible Grove. Totals are counted up to ``COUNT_CAP``. ``role_only`` ranks every Grove holding
    the role (the shadow-mode fallback). Hand-written SQL: the ORM's query building alone cost more than
    the whole decision.
    """
    if connection.vendor != "postgresql":
        return _candidates_portable(requirement, limit=limit, role_only=role_only)
    compat = requirement.compatibility
    params: dict = {
        "cutoff": timezone.now() - timedelta(seconds=settings.GROVE_STALE_AFTER_S), "limit": limit,
        "cap": COUNT_CAP, "substrates": sorted(needed_substrate(requirement)),
        "allowed": list(compat.platform.allowed), "cpu": requirement.resources.cpu_milli,
        "memory": requirement.resources.memory_bytes,
        "api": requirement.accelerators.api if requirement.accelerators and requirement.accelerators.api else "",
        "role_json": json.dumps([requirement.family]), "change_kind_json": json.dumps([compat.change_kind]),
        "isolation_json": json.dumps([compat.isolation]),
    }
    fresh = "g.enabled AND g.last_heartbeat_at >= %(cutoff)s"
    if role_only:
        condition = "g.roles @> %(role_json)s::jsonb"
    elif params["substrates"]:
        condition = " AND ".join([
            "g.substrate = ANY(%(substrates)s)",
            "g.roles @> %(role_json)s::jsonb",
            "g.change_kinds @> %(change_kind_json)s::jsonb",
            "g.isolation_modes @> %(isolation_json)s::jsonb",
            *(["g.platforms ?| %(allowed)s::text[]"] if compat.platform.allowed else []),
        ])
    else:
        condition = "false"
    # Position of the first accepted platform in the Grove's order: a CASE chain is far cheaper per row than
    # unnesting the array (a Grove reports at most MAX_GROVE_PLATFORMS platforms).
    rank = ("CASE " + " ".join(f"WHEN g.platforms->>{i} = ANY(%(allowed)s::text[]) THEN {i}"
                               for i in range(MAX_GROVE_PLATFORMS)) + f" ELSE {NO_PLATFORM_RANK} END"
            ) if compat.platform.allowed else "0"
    best_platform = "g.platforms->>0 = ANY(%(allowed)s::text[])" if compat.platform.allowed else "true"
    fits = ("EXISTS (SELECT 1 FROM groves_placementunit u WHERE u.grove_id = g.id AND u.cpu_milli_free >= %(cpu)s "
            "AND u.memory_bytes_free >= %(memory)s)")
    has_api = _CAP.format(kind="accelerator_api", test="c.value = %(api)s") if params["api"] else "true"
    api_order = f"{has_api} DESC, " if params["api"] else ""
    # One round trip: the best-key rows, a sample of the others, and a last row carrying both capped counts.
    first = f"""
        (SELECT true, {_COLUMNS}, 0, true, 0 FROM groves_grove g
          WHERE {fresh} AND {condition} AND {best_platform} AND {fits} AND {has_api}
          ORDER BY g.slug LIMIT %(limit)s)
        UNION ALL
        (SELECT false, {_COLUMNS}, {NO_PLATFORM_RANK}, false, 0 FROM groves_grove g
          WHERE {fresh} AND NOT ({condition}) ORDER BY g.slug LIMIT %(limit)s)
        UNION ALL
        SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
               (SELECT count(*) FROM (SELECT 1 FROM groves_grove g WHERE {fresh} AND {condition}
                                       LIMIT %(cap)s) e)::int, NULL,
               (SELECT count(*) FROM (SELECT 1 FROM groves_grove g WHERE {fresh} AND NOT ({condition})
                                       LIMIT %(cap)s) i)::int"""
    with connection.cursor() as cursor:
        cursor.execute(first, params)
        *rows, totals = cursor.fetchall()
        eligible_total, ineligible_total = totals[9], totals[11]
        result = CandidateSet(eligible=_rows_to_candidates(r[:11] for r in rows if r[0]),
                              others=_rows_to_candidates(r[:11] for r in rows if not r[0]),
                              eligible_total=eligible_total, ineligible_total=ineligible_total)
        if len(result.eligible) < min(limit, eligible_total):
            cursor.execute(f"""
                SELECT true, {_COLUMNS}, {rank} AS platform_rank, {fits} AS fits FROM groves_grove g
                 WHERE {fresh} AND {condition}
                 ORDER BY platform_rank, fits DESC, {api_order}g.slug LIMIT %(limit)s""", params)
            result.eligible = _rows_to_candidates(cursor.fetchall())
    return result


def _candidates_portable(requirement: ExecutionRequirement, *, limit: int, role_only: bool) -> CandidateSet:
    """The same selection and ranking as ``candidates``, evaluated in Python over the fresh Groves.

    For the embedded SQLite database of ``make run`` only (a demo estate of a handful of Groves); every
    deployment and the test suite run the PostgreSQL query above.
    """
    compat = requirement.compatibility
    substrates = needed_substrate(requirement)
    allowed = set(compat.platform.allowed)
    api = requirement.accelerators.api if requirement.accelerators and requirement.accelerators.api else ""
    cutoff = timezone.now() - timedelta(seconds=settings.GROVE_STALE_AFTER_S)
    groves = list(Grove.objects.filter(enabled=True, last_heartbeat_at__gte=cutoff)
                  .only(*FACT_FIELDS).prefetch_related("placement_units", "capabilities").order_by("slug"))

    def compatible(grove: Grove) -> bool:
        if role_only:
            return requirement.family in grove.roles
        return (grove.substrate in substrates and requirement.family in grove.roles
                and compat.change_kind in grove.change_kinds and compat.isolation in grove.isolation_modes
                and (not allowed or bool(allowed & set(grove.platforms))))

    def candidate(grove: Grove, eligible: bool) -> Candidate:
        ranks = [i for i, platform in enumerate(grove.platforms) if platform in allowed]
        rank = (ranks[0] if ranks else NO_PLATFORM_RANK) if allowed else 0
        fits = any(u.cpu_milli_free >= requirement.resources.cpu_milli
                   and u.memory_bytes_free >= requirement.resources.memory_bytes for u in grove.placement_units.all())
        return Candidate(id=grove.id, slug=grove.slug, substrate=grove.substrate, roles=grove.roles,
                         platforms=grove.platforms, isolation_modes=grove.isolation_modes,
                         change_kinds=grove.change_kinds, last_heartbeat_at=grove.last_heartbeat_at,
                         eligible=eligible, platform_rank=rank, fits_cpu_memory=fits)

    def has_api(grove: Grove) -> bool:
        return any(c.kind == "accelerator_api" and c.value == api for c in grove.capabilities.all())

    eligible = [grove for grove in groves if compatible(grove)]
    others = [grove for grove in groves if not compatible(grove)]
    ranked = sorted((candidate(g, True) for g in eligible),
                    key=lambda c: (c.platform_rank, not c.fits_cpu_memory,
                                   not has_api(next(g for g in eligible if g.id == c.id)) if api else False, c.slug))
    return CandidateSet(eligible=ranked[:limit], others=[candidate(g, False) for g in others[:limit]],
                        eligible_total=min(len(eligible), COUNT_CAP), ineligible_total=min(len(others), COUNT_CAP))


def fits_cpu_memory(grove: Grove, requirement: ExecutionRequirement) -> bool:
    return PlacementUnit.objects.filter(grove=grove, cpu_milli_free__gte=requirement.resources.cpu_milli,
                                        memory_bytes_free__gte=requirement.resources.memory_bytes).exists()


def grove_by_reference(reference: str) -> Grove | None:
    """A Grove by id or slug (an explicit pin may use either)."""
    queryset = Grove.objects.only(*FACT_FIELDS)
    try:
        return queryset.filter(pk=uuid.UUID(str(reference))).first()
    except ValueError:
        return queryset.filter(slug=reference).first()


def placement_for_subject(*, subject_type: str, subject_id: str) -> ExecutionPlacement | None:
    return (ExecutionPlacement.objects.select_related("grove")
            .filter(subject_type=subject_type, subject_id=subject_id).first())


def placement_list() -> QuerySet[ExecutionPlacement]:
    return ExecutionPlacement.objects.all().order_by("-created_at", "-id")
