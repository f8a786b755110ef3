"""The in-process fleet snapshot: every enabled Grove's ``GroveFacts``, indexed (``fleet.FleetIndex``).

Each process keeps one snapshot and refreshes it at most every ``PLACEMENT_FLEET_REFRESH_S`` seconds,
reloading only the Groves written since its watermark (``Grove.updated_at``, stamped by the database on
every write). A decision then costs no query over the fleet; ``services`` re-verifies against the
database whatever it persists.

``grove_facts`` is the one builder of a Grove's facts, from its row (a named values row or a model
instance) and its unit, device and accelerator-API rows: the snapshot uses it for every Grove it loads,
and ``load_facts`` for an explicit target read from the database.
"""
from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import F, QuerySet
from django.utils import timezone

from apps.accelerators import selectors as accelerator_selectors
from apps.accelerators.models import AcceleratorClaim
from apps.accelerators.vocabulary import ClaimState
from apps.core.db import sql_from_meta
from apps.groves.choices import CapabilityKind
from apps.groves.models import AcceleratorInventoryItem, Grove, GroveCapability, PlacementUnit
from apps.placement import fleet
from apps.placement.models import UnitLoad
from apps.placement.requirements import ExecutionRequirement
from apps.placement.rules import GroveFacts, frontier
from apps.placement.scoring import PREFERENCE_DEFAULT
from apps.placement.selectors import FACT_FIELDS

# Totals in a decision are exact up to this many Groves ("200+" beyond): counting every eligible Grove of
# a large fleet would make each decision's cost grow with the fleet.
COUNT_CAP = 200
# A write stamped just before a refresh read but committed after it is still picked up by the next
# refresh if it commits within this long (Grove writes are single statements or short transactions).
WATERMARK_OVERLAP = timedelta(seconds=1)
DEVICE_FIELDS = ("grove_id", "inventory_id", "vendor", "apis", "memory_bytes", "memory_kind", "memory_enforced",
                 "share_mode", "model")
# Above this many Groves, a reload reads their unit, device, API, claim and ledger rows unfiltered.
FILTER_MAX = 1000
_LOCK = threading.RLock()  # re-entered: a batch holds it across the decisions it makes
_FLEET = fleet.FleetIndex()
_STATE: dict = {"watermark": None, "refreshed_at": float("-inf")}


def grove_facts(grove, *, units: Iterable = (), devices: Iterable = (), apis: Iterable[str] = (),
                claims: Iterable = (), loads: Iterable = (), ready_after: float | None = None) -> GroveFacts:
    """A Grove's facts from its row (anything with the ``FACT_FIELDS`` attributes: a named values row or a
    model instance), its ``PlacementUnit`` rows, its ``AcceleratorInventoryItem`` rows, its accelerator
    APIs, Host's active accelerator claims on it (rows with ``unit_id`` and ``allocations``) and its
    ``UnitLoad`` rows (placements since its last free-count report, subtracted from each unit's free
    counts). The compatibility rules read only the row: a re-check of a stored or chosen Grove passes no
    more. ``ready_after``: ``ready_cutoff()``, read once by a caller building many."""
    units = list(units)
    polled = getattr(grove, "last_polled_at", None)
    reported_at = getattr(grove, "capacity_reported_at", None)
    load = {row.unit_id: (row.cpu_milli, row.memory_bytes) for row in loads if row.reported_at == reported_at}
    unit_free = tuple((unit.unit_id, unit.cpu_milli_free - load.get(unit.unit_id, (0, 0))[0],
                       unit.memory_bytes_free - load.get(unit.unit_id, (0, 0))[1]) for unit in units)
    return GroveFacts(
        id=str(grove.id), slug=grove.slug, substrate=grove.substrate, roles=tuple(grove.roles),
        platforms=tuple(grove.platforms), isolation_modes=tuple(grove.isolation_modes),
        change_kinds=tuple(grove.change_kinds), enabled=grove.enabled, last_heartbeat_at=grove.last_heartbeat_at,
        units=frontier((cpu, memory) for _unit, cpu, memory in unit_free), apis=frozenset(apis),
        accelerator_units=tuple(accelerator_selectors.units_from_rows(units)),
        devices=tuple(accelerator_selectors.devices_from_rows(devices)),
        claimed=tuple(sorted(accelerator_selectors.claimed_counts(claims).items())), unit_free=unit_free,
        unit_allocatable=tuple((unit.unit_id, unit.cpu_milli_allocatable, unit.memory_bytes_allocatable)
                               for unit in units),
        ready=polled is not None and polled.timestamp() >= (ready_cutoff() if ready_after is None else ready_after),
        last_polled_at=polled,
        preference=getattr(grove, "placement_preference", PREFERENCE_DEFAULT))


def _load(groves: QuerySet[Grove], *, every: bool, enabled_only: bool = True) -> tuple[list, list[GroveFacts]]:
    """The Grove rows and the facts of the enabled ones (of all of them unless ``enabled_only``), their units,
    devices, accelerator APIs, active claims and unit loads read in five more queries: for the listed
    Groves, or for ``every`` Grove without a filter."""
    rows = list(groves.values_list(*FACT_FIELDS, named=True))
    wanted = [row.id for row in rows if row.enabled or not enabled_only]
    units, devices, apis = defaultdict(list), defaultdict(list), defaultdict(list)
    claims, loads = defaultdict(list), defaultdict(list)
    if wanted:
        unit_rows = PlacementUnit.objects.values_list(
            "grove_id", "unit_id", "cpu_milli_allocatable", "cpu_milli_free", "memory_bytes_allocatable",
            "memory_bytes_free", "accelerators", named=True)
        device_rows = AcceleratorInventoryItem.objects.values_list(*DEVICE_FIELDS, named=True)
        api_rows = GroveCapability.objects.filter(kind=CapabilityKind.ACCELERATOR_API).values_list("grove_id",
                                                                                                   "value")
        claim_rows = AcceleratorClaim.objects.filter(state=ClaimState.ACTIVE, grove__isnull=False).values_list(
            "grove_id", "unit_id", "allocations", named=True)
        load_rows = UnitLoad.objects.values_list("grove_id", "unit_id", "reported_at", "cpu_milli", "memory_bytes",
                                                 named=True)
        # Thousands of Groves (every Grove's liveness stamped in one refresh window): their rows read whole,
        # not filtered by thousands of ids (one placeholder each, split and bound in Python: a third of a
        # 5,000-Grove reload's CPU).
        if not every and len(wanted) <= FILTER_MAX:
            unit_rows, device_rows, api_rows, claim_rows, load_rows = (
                rows.filter(grove_id__in=wanted) for rows in (unit_rows, device_rows, api_rows, claim_rows, load_rows))
        for row in unit_rows.order_by("grove_id", "unit_id"):
            units[row.grove_id].append(row)
        for row in device_rows.order_by("grove_id", "inventory_id"):
            devices[row.grove_id].append(row)
        for grove_id, api in api_rows:
            apis[grove_id].append(api)
        for row in claim_rows:
            claims[row.grove_id].append(row)
        for row in load_rows:
            loads[row.grove_id].append(row)
    ready_after = ready_cutoff()
    facts = [grove_facts(row, units=units[row.id], devices=devices[row.id], apis=apis[row.id], claims=claims[row.id],
                         loads=loads[row.id], ready_after=ready_after)
             for row in rows if row.enabled or not enabled_only]
    return rows, facts


def load_facts(groves: QuerySet[Grove]) -> list[GroveFacts]:
    """The facts of these Groves, enabled or not, read from the database now (an explicit target)."""
    return _load(groves, every=False, enabled_only=False)[1]


def fleet_reload(grove_ids: Iterable[str]) -> list[GroveFacts]:
    """Re-read these Groves from the database now (units, claims and loads included) into the snapshot:
    what a batch does for the Groves another process wrote since its decision. Returns their facts."""
    rows, facts = _load(Grove.objects.filter(id__in=list(grove_ids)), every=False)
    with _LOCK:
        for row in rows:
            if not row.enabled:
                _FLEET.remove(str(row.id))
        for item in facts:
            _FLEET.upsert(item)
    return facts


def assume(pairs: Iterable[tuple[GroveFacts, GroveFacts]]) -> None:
    """Put these facts (a committed batch's Groves, less what it placed on them: (as decided from, after))
    into the snapshot. A Grove whose facts are still the ones the batch decided from changes only its loads
    (``FleetIndex.loads_changed``); one reloaded meanwhile is filed again whole."""
    with _LOCK:
        for before, item in pairs:
            held = _FLEET.records.get(item.slug)
            if held is before:
                _FLEET.loads_changed(item)
            elif held is not None and held.id == item.id:
                _FLEET.upsert(item)


def claims_changed(grove_id) -> None:
    """An accelerator claim on this Grove was made or released: touch the Grove's row so every process's
    next incremental refresh reloads its claims (the trigger stamps ``updated_at``), and refresh this
    process's snapshot at its next decision."""
    if grove_id is None:
        return
    # The trigger keeps ``updated_at`` for a liveness-only write (groves migration 0003); a heartbeat that
    # moves backwards is stamped, so the claim moves it back by a microsecond: no staleness it could notice.
    Grove.objects.filter(pk=grove_id).update(last_heartbeat_at=F("last_heartbeat_at") - timedelta(microseconds=1))
    _STATE["refreshed_at"] = float("-inf")


def enabled_count_and_clock() -> tuple[int, datetime]:
    """(enabled Groves, the database's clock) in one round trip, PostgreSQL. Counted and timed before a
    refresh reads the rows: the next refresh starts from this database time (the ``updated_at`` trigger's
    clock; ``now()`` would be the start of a caller's transaction), which the ORM cannot read."""
    with connection.cursor() as cursor:
        cursor.execute(sql_from_meta("SELECT count(*), clock_timestamp() FROM {g} WHERE {g.enabled}", g=Grove))
        return cursor.fetchone()


def fleet_refresh(*, full: bool = False) -> int:
    """Bring the snapshot up to date: reload the Groves written since the watermark (all of them when
    ``full`` or on SQLite), then, if the enabled count disagrees (a Grove was deleted, or a write escaped
    the watermark), resynchronise the membership. Returns the number of Grove rows read."""
    postgresql = connection.vendor == "postgresql"
    full = full or _STATE["watermark"] is None or not postgresql
    total, at = None, None
    if postgresql:
        total, at = enabled_count_and_clock()
    groves = Grove.objects.all()
    if not full:
        groves = groves.filter(updated_at__gt=_STATE["watermark"] - WATERMARK_OVERLAP)
    rows, facts = _load(groves, every=full)
    with _LOCK:
        if full:
            _FLEET.replace_all(facts)
        else:
            for row in rows:
                if not row.enabled:
                    _FLEET.remove(str(row.id))
            for item in facts:
                _FLEET.upsert(item)
        _STATE["watermark"], _STATE["refreshed_at"] = at, time.monotonic()
        drifted = not full and total != len(_FLEET)
    return len(rows) + (_resync() if drifted else 0)


def _resync() -> int:
    """Drop the Groves the database no longer has enabled; load any enabled one the snapshot lacks."""
    present = {str(grove_id) for grove_id in Grove.objects.filter(enabled=True).values_list("id", flat=True)}
    with _LOCK:
        known = _FLEET.ids()
        for grove_id in known - present:
            _FLEET.remove(grove_id)
    if not present - known:
        return 0
    rows, facts = _load(Grove.objects.filter(id__in=present - known), every=False)
    with _LOCK:
        for item in facts:
            _FLEET.upsert(item)
    return len(rows)


def ready_cutoff() -> float:
    """The timestamp before which a Grove's last poll makes it unready (``GROVE_READY_WITHIN_S``)."""
    return (timezone.now() - timedelta(seconds=settings.GROVE_READY_WITHIN_S)).timestamp()


def stale_cutoff() -> float:
    """The timestamp before which a Grove's last heartbeat makes it stale (``GROVE_STALE_AFTER_S``)."""
    return (timezone.now() - timedelta(seconds=settings.GROVE_STALE_AFTER_S)).timestamp()


@contextmanager
def held() -> Iterator[tuple[fleet.FleetIndex, float]]:
    """The snapshot (refreshed first when due) and the staleness cutoff, held for a batch's decisions: no
    other thread of this process changes the snapshot meanwhile."""
    if time.monotonic() - _STATE["refreshed_at"] >= settings.PLACEMENT_FLEET_REFRESH_S:
        fleet_refresh()
    cutoff = stale_cutoff()
    with _LOCK:
        _FLEET.unready(ready_cutoff())
        yield _FLEET, cutoff


def candidates(requirement: ExecutionRequirement, *, limit: int, role_only: bool = False,
               start: int = 0, with_others: bool = True) -> fleet.CandidateSet:
    """A sample of ``limit`` eligible fresh Groves (``fleet.FleetIndex.select``, walked from ring point
    ``start``), a sample of the others by slug, and totals capped at ``COUNT_CAP``, from the fleet snapshot
    (refreshed first when it is older than ``PLACEMENT_FLEET_REFRESH_S``). ``role_only`` samples every Grove
    holding the role (the shadow-mode fallback)."""
    if time.monotonic() - _STATE["refreshed_at"] >= settings.PLACEMENT_FLEET_REFRESH_S:
        fleet_refresh()
    cutoff = stale_cutoff()
    with _LOCK:
        _FLEET.unready(ready_cutoff())
        return _FLEET.select(requirement, limit=limit, cap=COUNT_CAP, cutoff=cutoff, role_only=role_only,
                             start=start, with_others=with_others)
