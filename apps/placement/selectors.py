"""Reads for placement: candidate Groves (pre-filtered with the indexed ``GroveCapability`` table) and
stored placements.

The candidate query does the selective work in PostgreSQL: role, change kind, isolation and platform
are indexed ``(kind, value, grove)`` lookups, substrate is a column, and ranking (platform preference
from the capability's ``rank``, then a CPU/memory fit on any reported unit) is an ORDER BY with a LIMIT.
Python only ever sees a bounded number of Groves per decision.
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Exists, IntegerField, Min, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.groves.models import Grove, GroveCapability, PlacementUnit
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


def fresh_groves() -> QuerySet[Grove]:
    cutoff = timezone.now() - timedelta(seconds=settings.GROVE_STALE_AFTER_S)
    return Grove.objects.filter(enabled=True, last_heartbeat_at__gte=cutoff).only(*FACT_FIELDS)


def _has(kind: str, value: str | None = None, values: tuple[str, ...] | None = None) -> Exists:
    caps = GroveCapability.objects.filter(grove=OuterRef("pk"), kind=kind)
    caps = caps.filter(value=value) if values is None else caps.filter(value__in=values)
    return Exists(caps)


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


def _ranked(queryset: QuerySet[Grove], requirement: ExecutionRequirement) -> QuerySet[Grove]:
    allowed = requirement.compatibility.platform.allowed
    if allowed:
        rank = Subquery(
            GroveCapability.objects.filter(grove=OuterRef("pk"), kind="platform", value__in=allowed)
            .values("grove").annotate(best=Min("rank")).values("best")[:1],
            output_field=IntegerField(),
        )
        queryset = queryset.annotate(platform_rank=Coalesce(rank, Value(NO_PLATFORM_RANK)))
    else:
        queryset = queryset.annotate(platform_rank=Value(0, output_field=IntegerField()))
    resources = requirement.resources
    fits = PlacementUnit.objects.filter(grove=OuterRef("pk"), cpu_milli_free__gte=resources.cpu_milli,
                                        memory_bytes_free__gte=resources.memory_bytes)
    queryset = queryset.annotate(fits_cpu_memory=Exists(fits))
    order = ["platform_rank", "-fits_cpu_memory"]
    if requirement.accelerators is not None and requirement.accelerators.api:
        queryset = queryset.annotate(has_accelerator_api=_has("accelerator_api", requirement.accelerators.api))
        order.append("-has_accelerator_api")
    return queryset.order_by(*order, "slug")


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
    eligible_total: int
    fresh_total: int


_CAP = "EXISTS (SELECT 1 FROM groves_grovecapability c WHERE c.grove_id = g.id AND c.kind = '{kind}' AND {test})"
_COLUMNS = "g.id, g.slug, g.substrate, g.roles, g.platforms, g.isolation_modes, g.change_kinds, g.last_heartbeat_at"


def _json(value):
    return json.loads(value) if isinstance(value, str | bytes) else value


def candidates(requirement: ExecutionRequirement, *, limit: int) -> CandidateSet:
    """One round trip: the ranked eligible Groves (with their count) and a sample of the others.

    The compatibility rules become indexed ``GroveCapability`` semi-joins plus the substrate column; the
    ranking is an ORDER BY over the platform capability's ``rank`` and a CPU/memory fit on any unit, so
    PostgreSQL returns at most ``2 * limit`` rows whatever the fleet size. Hand-written SQL because the
    ORM's query building alone cost more than the whole decision.
    """
    compat = requirement.compatibility
    params: dict = {
        "cutoff": timezone.now() - timedelta(seconds=settings.GROVE_STALE_AFTER_S), "limit": limit,
        "role": requirement.family, "change_kind": compat.change_kind, "isolation": compat.isolation,
        "substrates": sorted(needed_substrate(requirement)), "allowed": list(compat.platform.allowed),
        "cpu": requirement.resources.cpu_milli, "memory": requirement.resources.memory_bytes,
        "api": requirement.accelerators.api if requirement.accelerators and requirement.accelerators.api else "",
    }
    params.update(role_json=json.dumps([requirement.family]), change_kind_json=json.dumps([compat.change_kind]),
                  isolation_json=json.dumps([compat.isolation]))
    fresh = "g.enabled AND g.last_heartbeat_at >= %(cutoff)s"
    # jsonb containment on the Grove's own lists: no per-row subplans, so planning and execution stay cheap.
    condition = " AND ".join([
        "g.substrate = ANY(%(substrates)s)",
        "g.roles @> %(role_json)s::jsonb",
        "g.change_kinds @> %(change_kind_json)s::jsonb",
        "g.isolation_modes @> %(isolation_json)s::jsonb",
        *(["g.platforms ?| %(allowed)s::text[]"] if compat.platform.allowed else []),
    ]) if params["substrates"] else "false"
    # Position of the first accepted platform in the Grove's order: a CASE chain is far cheaper per row than
    # unnesting the array (a Grove reports at most MAX_GROVE_PLATFORMS platforms).
    rank = ("CASE " + " ".join(f"WHEN g.platforms->>{i} = ANY(%(allowed)s::text[]) THEN {i}"
                               for i in range(MAX_GROVE_PLATFORMS)) + f" ELSE {NO_PLATFORM_RANK} END"
            ) if compat.platform.allowed else "0"
    fits = ("EXISTS (SELECT 1 FROM groves_placementunit u WHERE u.grove_id = g.id AND u.cpu_milli_free >= %(cpu)s "
            "AND u.memory_bytes_free >= %(memory)s)")
    has_api = _CAP.format(kind="accelerator_api", test="c.value = %(api)s") if params["api"] else "true"
    sql = f"""
        (SELECT true, {_COLUMNS}, {rank} AS platform_rank, {fits} AS fits, {has_api} AS has_api,
                count(*) OVER () AS total
           FROM groves_grove g WHERE {fresh} AND {condition}
          ORDER BY platform_rank, fits DESC, has_api DESC, g.slug LIMIT %(limit)s)
        UNION ALL
        (SELECT false, {_COLUMNS}, {NO_PLATFORM_RANK}, false, false,
                (SELECT count(*) FROM groves_grove g WHERE {fresh})
           FROM groves_grove g WHERE {fresh} AND NOT ({condition})
          ORDER BY g.slug LIMIT %(limit)s)"""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    result = CandidateSet(eligible=[], others=[], eligible_total=0, fresh_total=0)
    for row in rows:
        eligible, grove_id, slug, substrate, roles, platforms, isolation, kinds, heartbeat, prank, fit, _, total = row
        candidate = Candidate(id=grove_id, slug=slug, substrate=substrate, roles=_json(roles),
                              platforms=_json(platforms), isolation_modes=_json(isolation),
                              change_kinds=_json(kinds), last_heartbeat_at=heartbeat, eligible=eligible,
                              platform_rank=prank if prank is not None else NO_PLATFORM_RANK, fits_cpu_memory=fit)
        if eligible:
            result.eligible.append(candidate)
            result.eligible_total = total
        else:
            result.others.append(candidate)
            result.fresh_total = total
    if not result.others:
        result.fresh_total = Grove.objects.filter(enabled=True, last_heartbeat_at__gte=params["cutoff"]).count()
    return result


def role_holders(requirement: ExecutionRequirement, *, limit: int) -> list[Grove]:
    """Fresh Groves holding the role, in chooser order regardless of compatibility (shadow fallback)."""
    queryset = fresh_groves().filter(_has("role", requirement.family))
    return list(_ranked(queryset, requirement)[:limit])


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
