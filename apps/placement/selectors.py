"""Reads for placement: candidate Groves (from the in-process fleet snapshot) and stored placements.

Each process keeps a ``fleet.FleetIndex`` of every enabled Grove and refreshes it at most every
``PLACEMENT_FLEET_REFRESH_S`` seconds, reloading only the Groves written since its watermark
(``Grove.updated_at``, stamped by the database on every write). A decision then costs no query over the
fleet; ``services`` re-verifies against the database whatever it persists.
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from django.conf import settings
from django.db import connection
from django.db.models import QuerySet
from django.utils import timezone

from apps.accelerators import selectors as accelerator_selectors
from apps.accelerators.choices import ClaimState
from apps.accelerators.models import AcceleratorClaim
from apps.groves.choices import CapabilityKind
from apps.groves.models import AcceleratorInventoryItem, Grove, GroveCapability, PlacementUnit
from apps.placement import fleet
from apps.placement.models import ExecutionPlacement
from apps.placement.requirements import ExecutionRequirement
from apps.placement.rules import GroveFacts

FACT_FIELDS = ("id", "slug", "substrate", "roles", "platforms", "isolation_modes", "change_kinds", "enabled",
               "last_heartbeat_at")


def facts(grove: Grove | Candidate) -> GroveFacts:
    if getattr(grove, "facts", None) is not None:  # a candidate from the snapshot carries them
        return grove.facts
    return GroveFacts(id=str(grove.id), slug=grove.slug, substrate=grove.substrate, roles=tuple(grove.roles),
                      platforms=tuple(grove.platforms), isolation_modes=tuple(grove.isolation_modes),
                      change_kinds=tuple(grove.change_kinds))


@dataclass
class Candidate:
    """A fresh Grove as the snapshot holds it (duck-types the Grove fields that ``facts`` reads)."""

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
    accelerator_units: tuple = ()  # accelerators.rules.Unit, as reported
    devices: tuple = ()  # accelerators.rules.Device, as reported
    facts: GroveFacts | None = None

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
# A write stamped just before a refresh read but committed after it is still picked up by the next
# refresh if it commits within this long (Grove writes are single statements or short transactions).
WATERMARK_OVERLAP = timedelta(seconds=1)
_LOCK = threading.Lock()
_FLEET = fleet.FleetIndex()
_STATE: dict = {"watermark": None, "refreshed_at": float("-inf")}
DEVICE_FIELDS = ("grove_id", "inventory_id", "vendor", "apis", "memory_bytes", "memory_kind", "memory_enforced",
                 "share_mode", "model")
_FLEET_FIELDS = ("id", "slug", "substrate", "roles", "platforms", "isolation_modes", "change_kinds", "enabled",
                 "last_heartbeat_at")


def fleet_refresh(*, full: bool = False) -> int:
    """Bring the snapshot up to date: reload the Groves written since the watermark (all of them when
    ``full`` or on SQLite), then, if the enabled count disagrees (a Grove was deleted, or a write escaped
    the watermark), resynchronise the membership. Returns the number of Grove rows read."""
    postgresql = connection.vendor == "postgresql"
    full = full or _STATE["watermark"] is None or not postgresql
    total, at = None, None
    if postgresql:
        # Counted and timed before the rows are read: the next refresh starts from this database time (the
        # trigger's clock; now() would be the start of a caller's transaction).
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*), clock_timestamp() FROM groves_grove WHERE enabled")
            total, at = cursor.fetchone()
    groves = Grove.objects.all()
    if not full:
        groves = groves.filter(updated_at__gt=_STATE["watermark"] - WATERMARK_OVERLAP)
    rows, records = _load(groves, every=full)
    with _LOCK:
        if full:
            _FLEET.replace_all(records)
        else:
            for row in rows:
                if not row[7]:
                    _FLEET.remove(row[0])
            for record in records:
                _FLEET.upsert(record)
        _STATE["watermark"], _STATE["refreshed_at"] = at, time.monotonic()
        drifted = not full and total != len(_FLEET)
    return len(rows) + (_resync() if drifted else 0)


def _resync() -> int:
    """Drop the Groves the database no longer has enabled; load any enabled one the snapshot lacks."""
    present = set(Grove.objects.filter(enabled=True).values_list("id", flat=True))
    with _LOCK:
        known = _FLEET.ids()
        for grove_id in known - present:
            _FLEET.remove(grove_id)
    if not present - known:
        return 0
    rows, records = _load(Grove.objects.filter(id__in=present - known), every=False)
    with _LOCK:
        for record in records:
            _FLEET.upsert(record)
    return len(rows)


def _load(groves: QuerySet[Grove], *, every: bool) -> tuple[list[tuple], list[fleet.GroveRecord]]:
    """The Grove rows and the records of the enabled ones (their units, devices and accelerator APIs read
    in three more queries: for the listed Groves, or for ``every`` Grove without a filter)."""
    rows = list(groves.values_list(*_FLEET_FIELDS))
    enabled = [row[0] for row in rows if row[7]]
    units, devices, apis = defaultdict(list), defaultdict(list), defaultdict(set)
    if enabled:
        unit_rows = PlacementUnit.objects.values_list("grove_id", "unit_id", "cpu_milli_free", "memory_bytes_free",
                                                      "accelerators", named=True)
        device_rows = AcceleratorInventoryItem.objects.values_list(*DEVICE_FIELDS, named=True)
        api_rows = GroveCapability.objects.filter(kind=CapabilityKind.ACCELERATOR_API).values_list("grove_id",
                                                                                                   "value")
        if not every:
            unit_rows, device_rows, api_rows = (rows.filter(grove_id__in=enabled)
                                                for rows in (unit_rows, device_rows, api_rows))
        for row in unit_rows.order_by("grove_id", "unit_id"):
            units[row.grove_id].append(row)
        for row in device_rows.order_by("grove_id", "inventory_id"):
            devices[row.grove_id].append(row)
        for grove_id, api in api_rows:
            apis[grove_id].add(api)
    records = [fleet.GroveRecord(
        id=grove_id, slug=slug, substrate=substrate, roles=tuple(roles), platforms=tuple(platforms),
        isolation_modes=tuple(isolation), change_kinds=tuple(kinds), last_heartbeat_at=heartbeat,
        units=fleet.frontier((u.cpu_milli_free, u.memory_bytes_free) for u in units[grove_id]),
        apis=frozenset(apis[grove_id]),
        accelerator_units=tuple(accelerator_selectors.units_from_rows(units[grove_id])),
        devices=tuple(accelerator_selectors.devices_from_rows(devices[grove_id])))
        for grove_id, slug, substrate, roles, platforms, isolation, kinds, on, heartbeat in rows if on]
    return rows, records


def candidates(requirement: ExecutionRequirement, *, limit: int, role_only: bool = False) -> CandidateSet:
    """The ``limit`` best eligible fresh Groves in chooser order, a sample of the others by slug, and totals
    capped at ``COUNT_CAP``, from the fleet snapshot (refreshed first when it is older than
    ``PLACEMENT_FLEET_REFRESH_S``). ``role_only`` ranks every Grove holding the role (the shadow-mode
    fallback)."""
    if time.monotonic() - _STATE["refreshed_at"] >= settings.PLACEMENT_FLEET_REFRESH_S:
        fleet_refresh()
    cutoff = (timezone.now() - timedelta(seconds=settings.GROVE_STALE_AFTER_S)).timestamp()
    with _LOCK:
        found = _FLEET.select(requirement, limit=limit, cap=COUNT_CAP, cutoff=cutoff, role_only=role_only)
    return CandidateSet(
        eligible=[_candidate(item.record, True, item.platform_rank, item.fits_cpu_memory) for item in found.eligible],
        others=[_candidate(record, False, fleet.NO_PLATFORM_RANK, False) for record in found.others],
        eligible_total=found.eligible_total, ineligible_total=found.ineligible_total)


class _Claim(NamedTuple):
    unit_id: str
    allocations: list


def _candidate(record: fleet.GroveRecord, eligible: bool, platform_rank: int, fits: bool) -> Candidate:
    return Candidate(id=record.id, slug=record.slug, substrate=record.substrate, roles=list(record.roles),
                     platforms=list(record.platforms), isolation_modes=list(record.isolation_modes),
                     change_kinds=list(record.change_kinds), last_heartbeat_at=record.last_heartbeat_at,
                     eligible=eligible, platform_rank=platform_rank, fits_cpu_memory=fits,
                     accelerator_units=record.accelerator_units, devices=record.devices, facts=record.facts)


def admission_inputs(groves: list[Candidate | Grove]) -> dict[str, accelerator_selectors.AdmissionInputs]:
    """Accelerator admission inputs: a candidate's reported units and devices come with it from the
    snapshot and only Host's active claims are read (one query); a Grove (an explicit target) is read
    from the database whole."""
    targets = [g.id for g in groves if not isinstance(g, Candidate)]
    from_db = accelerator_selectors.admission_inputs(targets) if targets else {}
    known = [g for g in groves if isinstance(g, Candidate)]
    claims = defaultdict(list)
    if known:
        # Hand-written: the ORM's query building cost more than the round trip itself.
        grove_field = AcceleratorClaim._meta.get_field("grove")
        table = AcceleratorClaim._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT grove_id, unit_id, allocations FROM {table} WHERE state = %s AND grove_id IN "
                           f"({', '.join(['%s'] * len(known))})",
                           [ClaimState.ACTIVE, *(grove_field.get_db_prep_value(g.id, connection) for g in known)])
            for grove_id, unit_id, allocations in cursor.fetchall():
                claims[str(grove_field.to_python(grove_id))].append(
                    _Claim(unit_id, json.loads(allocations) if isinstance(allocations, str) else allocations))
    return {**from_db, **{str(g.id): (list(g.accelerator_units), list(g.devices),
                                      accelerator_selectors.claimed_counts(claims[str(g.id)])) for g in known}}


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
