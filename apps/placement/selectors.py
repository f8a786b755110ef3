"""Reads for placement: a Grove by reference, Host's active accelerator claims, stored placements.

The in-process fleet snapshot the chooser decides from lives in ``apps.placement.snapshot``.
"""
from __future__ import annotations

import json
import uuid
from collections import defaultdict
from typing import NamedTuple

from django.db import connection
from django.db.models import QuerySet

from apps.accelerators import selectors as accelerator_selectors
from apps.accelerators.choices import ClaimState
from apps.accelerators.models import AcceleratorClaim
from apps.accelerators.rules import Slot
from apps.groves.models import Grove, PlacementUnit
from apps.placement.admission import UnitCapacity
from apps.placement.choices import Outcome
from apps.placement.models import ExecutionPlacement

# Every Grove column placement reads (``snapshot.grove_facts`` turns a row of them into ``GroveFacts``).
FACT_FIELDS = ("id", "slug", "substrate", "roles", "platforms", "isolation_modes", "change_kinds", "enabled",
               "last_heartbeat_at")


class _Claim(NamedTuple):
    unit_id: str
    allocations: list


def claimed_counts(grove_ids: list[str]) -> dict[str, dict[tuple[str, str], int]]:
    """Host's active accelerator claims per Grove id, as ``accelerators.selectors.claimed_counts`` (one query)."""
    claims: dict[str, list[_Claim]] = defaultdict(list)
    if grove_ids:
        # Hand-written: the ORM's query building cost more than the round trip itself.
        grove_field = AcceleratorClaim._meta.get_field("grove")
        table = AcceleratorClaim._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT grove_id, unit_id, allocations FROM {table} WHERE state = %s AND grove_id IN "
                           f"({', '.join(['%s'] * len(grove_ids))})",
                           [ClaimState.ACTIVE, *(grove_field.get_db_prep_value(g, connection) for g in grove_ids)])
            for grove_id, unit_id, allocations in cursor.fetchall():
                claims[str(grove_field.to_python(grove_id))].append(
                    _Claim(unit_id, json.loads(allocations) if isinstance(allocations, str) else allocations))
    return {grove_id: accelerator_selectors.claimed_counts(claims[grove_id]) for grove_id in grove_ids}


def unit_capacities(grove_ids: list[str]) -> dict[str, list[UnitCapacity]]:
    """Every reported unit of these Groves with allocatable and free amounts, read now (one query): resource
    admission's input, read at decision time like Host's claims (never from the snapshot's cache)."""
    units: dict[str, list[UnitCapacity]] = {grove_id: [] for grove_id in grove_ids}
    rows = (PlacementUnit.objects.filter(grove_id__in=grove_ids).order_by("grove_id", "unit_id")
            .values_list("grove_id", "unit_id", "cpu_milli_allocatable", "cpu_milli_free",
                         "memory_bytes_allocatable", "memory_bytes_free", "accelerators"))
    for grove_id, unit_id, cpu_allocatable, cpu_free, memory_allocatable, memory_free, slots in rows:
        units.setdefault(str(grove_id), []).append(UnitCapacity(
            unit_id, cpu_allocatable, cpu_free, memory_allocatable, memory_free,
            tuple(Slot(slot["inventory_id"], slot["allocatable"], slot["free"]) for slot in slots)))
    return units


def groves_by_reference(reference: str) -> QuerySet[Grove]:
    """The Grove (at most one) with this id or slug (an explicit pin may use either)."""
    try:
        return Grove.objects.filter(pk=uuid.UUID(str(reference)))
    except ValueError:
        return Grove.objects.filter(slug=reference)


def grove_by_reference(reference: str) -> Grove | None:
    """A Grove by id or slug, with the columns placement reads."""
    return groves_by_reference(reference).only(*FACT_FIELDS).first()


def placement_for_subject(*, subject_type: str, subject_id: str) -> ExecutionPlacement | None:
    """The subject's *placement* (a retry re-reads it); a stored refusal or wait is never one."""
    return (ExecutionPlacement.objects.select_related("grove")
            .filter(subject_type=subject_type, subject_id=subject_id, outcome=Outcome.PLACED).first())


def placement_list() -> QuerySet[ExecutionPlacement]:
    return ExecutionPlacement.objects.all().order_by("-created_at", "-id")
