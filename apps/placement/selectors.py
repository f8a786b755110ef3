"""Reads for placement: candidate Groves (pre-filtered with the indexed ``GroveCapability`` table) and
stored placements.

The candidate query does the selective work in PostgreSQL: role, change kind, isolation and platform
are indexed ``(kind, value, grove)`` lookups, substrate is a column, and ranking (platform preference
from the capability's ``rank``, then a CPU/memory fit on any reported unit) is an ORDER BY with a LIMIT.
Python only ever sees a bounded number of Groves per decision.
"""
from __future__ import annotations

import uuid
from datetime import timedelta

from django.conf import settings
from django.db.models import Count, Exists, IntegerField, Min, OuterRef, Q, QuerySet, Subquery, Value, Window
from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.groves.models import Grove, GroveCapability, PlacementUnit
from apps.placement.models import ExecutionPlacement
from apps.placement.requirements import ExecutionRequirement
from apps.placement.rules import GroveFacts

NO_PLATFORM_RANK = 1000
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


def _compatible(requirement: ExecutionRequirement) -> Q | None:
    """The compatibility rules as one indexed filter (None: no Grove can ever pass)."""
    substrates = needed_substrate(requirement)
    if not substrates:
        return None
    compat = requirement.compatibility
    condition = (Q(_has("role", requirement.family)) & Q(_has("change_kind", compat.change_kind))
                 & Q(_has("isolation", compat.isolation)))
    if len(substrates) == 1:
        condition &= Q(substrate=next(iter(substrates)))
    if compat.platform.allowed:
        condition &= Q(_has("platform", values=compat.platform.allowed))
    return condition


def eligible_candidates(requirement: ExecutionRequirement, *, limit: int) -> list[Grove]:
    """The best ``limit`` fresh Groves that pass every compatibility rule, in chooser order, each carrying
    ``platform_rank``, ``fits_cpu_memory`` and ``eligible_total`` (the count before the limit)."""
    condition = _compatible(requirement)
    if condition is None:
        return []
    queryset = _ranked(fresh_groves().filter(condition), requirement).annotate(eligible_total=Window(Count("id")))
    return list(queryset[:limit])


def any_eligible(requirement: ExecutionRequirement) -> bool:
    condition = _compatible(requirement)
    return condition is not None and fresh_groves().filter(condition).exists()


def role_holders(requirement: ExecutionRequirement, *, limit: int) -> list[Grove]:
    """Fresh Groves holding the role, in chooser order regardless of compatibility (shadow fallback)."""
    queryset = fresh_groves().filter(_has("role", requirement.family))
    return list(_ranked(queryset, requirement)[:limit])


def ineligible_sample(requirement: ExecutionRequirement, *, limit: int) -> tuple[list[Grove], int]:
    """Up to ``limit`` fresh Groves that fail some rule (to explain why), and how many fail in all."""
    condition = _compatible(requirement)
    queryset = fresh_groves() if condition is None else fresh_groves().exclude(condition)
    rows = list(queryset.annotate(ineligible_total=Window(Count("id"))).order_by("slug")[:limit])
    return rows, (rows[0].ineligible_total if rows else 0)


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
