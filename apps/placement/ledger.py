"""A batch's assume ledger and its re-verification under the unit rows' lock (``writes.placements_write`` and
``replacements_write`` call these inside their transaction).

``verify`` locks the units a batch places on (only those), re-reads their reported free counts and the
ledger (``UnitLoad``: what Host has placed on each unit since the Grove last reported), and re-checks every
planned placement and its Grove against the database; ``ledger_write`` then adds the batch's placements to
the ledger in one statement. Raw SQL for both (docs/architecture.md, "Fast paths"), with the ORM forms
SQLite takes beside them.
"""
from __future__ import annotations

import functools
import json
from datetime import UTC, datetime

from django.db import connection

from apps.core.db import pg_array, sql_from_meta
from apps.groves.models import Grove, PlacementUnit
from apps.placement import snapshot
from apps.placement.models import UnitLoad
from apps.placement.plan import Plan
from apps.placement.rules import GroveFacts
from apps.placement.vocabulary import Chooser


class Conflicted(Exception):
    """Groves a batch placed on changed under it (found under the unit rows' lock)."""

    def __init__(self, grove_ids: set[str]):
        super().__init__(f"{len(grove_ids)} Groves changed under the batch")
        self.grove_ids = grove_ids


def verify(plans: list[Plan]) -> dict[tuple[str, str], list]:
    """``verified`` that raises ``Conflicted`` with the Groves that no longer hold (all or nothing)."""
    ledger, conflicted = verified(plans)
    if conflicted:
        raise Conflicted(conflicted)
    return ledger


def verified(plans: list[Plan]) -> tuple[dict[tuple[str, str], list], set[str]]:
    """Under the lock of the unit rows the plans take (only those: another writer's units are not this
    batch's business): every planned placement still fits its unit by the database's own counts (reported
    free less the ledger), and its Grove is still enabled, fresh and as the decision saw it. Returns the
    ledger entries of those units ([report token, cpu, memory, touched]: the token is the Grove's
    ``capacity_reported_at`` as ``_verify_rows`` reads it, compared and written back as it is) and the Groves
    that no longer hold (their plans must not be written, nor counted in the ledger)."""
    grove_ids = sorted({plan.facts.id for plan in plans})
    wanted = sorted({(plan.facts.id, plan.unit_id) for plan in plans if plan.unit_id is not None})
    groves, units = _verify_rows(grove_ids, wanted, snapshot.stale_cutoff())
    free, ledger = {}, {}
    for grove_id, unit_id, cpu, memory, at, load_cpu, load_memory in units:
        row = groves.get(grove_id)
        reported_at = row[3] if row is not None else None
        if at != reported_at or load_cpu is None:
            load_cpu, load_memory = 0, 0
        free[(grove_id, unit_id)] = [cpu - load_cpu, memory - load_memory]
        ledger[(grove_id, unit_id)] = [reported_at, load_cpu, load_memory, False]
    holds: dict[str, bool] = {}  # per Grove: still enabled, fresh and as the decisions saw it
    conflicted = set()
    for plan in plans:
        facts = plan.facts
        if plan.chooser != Chooser.EXPLICIT:
            good = holds.get(facts.id)
            if good is None:
                good = holds[facts.id] = _grove_holds(groves.get(facts.id), facts)
            if not good:
                conflicted.add(facts.id)
                continue
        elif facts.id not in groves:
            conflicted.add(facts.id)
            continue
        if plan.unit_id is None:
            continue
        room = free.get((facts.id, plan.unit_id))
        resources = plan.requirement.resources
        if room is None or room[0] < resources.cpu_milli or room[1] < resources.memory_bytes:
            conflicted.add(facts.id)
            continue
        room[0] -= resources.cpu_milli
        room[1] -= resources.memory_bytes
    return ledger, conflicted


_LISTED: dict[str | bytes, tuple] = {}


def _listed(value) -> tuple:
    """A JSON array column as a tuple (the raw read hands ``jsonb`` over as text, the ORM as a list). The
    texts are few (a fleet's role and platform lists repeat), so each is parsed once."""
    if not isinstance(value, str | bytes):
        return tuple(value)
    found = _LISTED.get(value)
    if found is None:
        if len(_LISTED) >= 4096:
            _LISTED.clear()
        found = _LISTED[value] = tuple(json.loads(value))
    return found


def _grove_holds(row, facts: GroveFacts) -> bool:
    return (row is not None and row[1] and row[2] and row[4] == facts.substrate
            and (_listed(row[5]), _listed(row[6]), _listed(row[7]), _listed(row[8]))
            == (facts.roles, facts.platforms, facts.isolation_modes, facts.change_kinds))


# A Grove as verify reads it: id, enabled, fresh (heartbeat at or after the cutoff), the free-count report's
# token, substrate and the four lists the rules read.
_GROVE_COLUMNS = ("id", "enabled", "last_heartbeat_at", "capacity_reported_at", "substrate", "roles", "platforms",
                  "isolation_modes", "change_kinds")


@functools.cache
def _sql_units_locked() -> str:
    return sql_from_meta(
        "SELECT u.{u.grove}::text, u.{u.unit_id}, u.{u.cpu_milli_free}, u.{u.memory_bytes_free} "
        "FROM unnest(%s::uuid[], %s::text[]) AS w(grove_id, unit_id) "
        "JOIN {u} u ON u.{u.grove} = w.grove_id AND u.{u.unit_id} = w.unit_id "
        "ORDER BY u.{u.grove}, u.{u.unit_id} FOR UPDATE OF u", u=PlacementUnit)


@functools.cache
def _sql_groves() -> str:
    # Timestamps as text and freshness as a boolean: loading thousands of timestamptz values per batch
    # into datetimes was a tenth of verify's CPU. The report token is compared and written back as text.
    return sql_from_meta(
        "SELECT g.{g.id}::text, g.{g.enabled}, g.{g.last_heartbeat_at} >= %s, g.{g.capacity_reported_at}::text, "
        "g.{g.substrate}, g.{g.roles}::text, g.{g.platforms}::text, g.{g.isolation_modes}::text, "
        "g.{g.change_kinds}::text FROM {g} g WHERE g.{g.id} = ANY(%s::uuid[])", g=Grove)


@functools.cache
def _sql_ledger_read() -> str:
    return sql_from_meta(
        "SELECT l.{l.grove}::text, l.{l.unit_id}, l.{l.reported_at}::text, l.{l.cpu_milli}, l.{l.memory_bytes} "
        "FROM unnest(%s::uuid[], %s::text[]) AS w(grove_id, unit_id) "
        "JOIN {l} l ON l.{l.grove} = w.grove_id AND l.{l.unit_id} = w.unit_id", l=UnitLoad)


@functools.cache
def _sql_ledger_upsert() -> str:
    return sql_from_meta(
        "INSERT INTO {l} ({l.grove}, {l.unit_id}, {l.reported_at}, {l.cpu_milli}, {l.memory_bytes}) "
        "SELECT * FROM unnest(%s::uuid[], %s::text[], %s::timestamptz[], %s::bigint[], %s::bigint[]) "
        "ON CONFLICT ({l.grove}, {l.unit_id}) DO UPDATE SET {l.reported_at} = EXCLUDED.{l.reported_at}, "
        "{l.cpu_milli} = EXCLUDED.{l.cpu_milli}, {l.memory_bytes} = EXCLUDED.{l.memory_bytes}", l=UnitLoad)


def _verify_rows(grove_ids: list[str], wanted: list[tuple[str, str]], cutoff: float) -> tuple[dict[str, tuple],
                                                                                              list[tuple]]:
    """The Groves' rows (by id: id, enabled, fresh at ``cutoff``, report token, substrate, roles, platforms,
    isolation modes, change kinds) and, locked in (Grove, unit) order, the wanted units' free counts with
    their ledger rows: (grove id, unit id, CPU free, memory free, ledger report token, ledger CPU, ledger
    memory). The report token is ``capacity_reported_at`` as this database's read gives it (text on
    PostgreSQL, a datetime on SQLite): only compared, and written back into the ledger."""
    if connection.vendor == "postgresql":
        # Three statements, no model objects: at a full batch these are thousands of rows. The units are
        # joined to the unnested (Grove, unit) pairs, one unique-index probe each, and locked as sorted:
        # every batch (and every accelerator claim, which locks a Grove's units in unit order) takes its
        # locks in the same order, so they wait on each other, never in a cycle. The Grove rows and the
        # ledger are read by statements of their own *after* the lock is held: a statement reads what was
        # committed when it started, so a ledger joined into the locking statement would be the one from
        # before a concurrent batch that held the lock committed (its placements lost: overcommit).
        units_wanted = [pg_array([grove_id for grove_id, _unit in wanted]),
                        pg_array([unit_id for _grove, unit_id in wanted])]
        with connection.cursor() as cursor:
            cursor.execute(_sql_units_locked(), units_wanted)
            locked = cursor.fetchall()
            cursor.execute(_sql_groves(), [datetime.fromtimestamp(cutoff, tz=UTC), pg_array(grove_ids)])
            groves = {row[0]: row for row in cursor.fetchall()}
            cursor.execute(_sql_ledger_read(), units_wanted)
            loads = {(row[0], row[1]): row[2:] for row in cursor.fetchall()}
        return groves, [(grove_id, unit_id, cpu, memory, *loads.get((grove_id, unit_id), (None, 0, 0)))
                        for grove_id, unit_id, cpu, memory in locked]
    units = []
    for grove_id, unit_id, cpu, memory in (PlacementUnit.objects.select_for_update().filter(grove_id__in=grove_ids)
                                           .order_by("grove_id", "unit_id")
                                           .values_list("grove_id", "unit_id", "cpu_milli_free", "memory_bytes_free")):
        units.append((str(grove_id), unit_id, cpu, memory))
    groves = {str(row[0]): (str(row[0]), row[1], row[2] is not None and row[2].timestamp() >= cutoff, *row[3:])
              for row in Grove.objects.filter(id__in=grove_ids).values_list(*_GROVE_COLUMNS)}
    keys = set(wanted)
    loads = {(str(g), u): (at, cpu, memory) for g, u, at, cpu, memory in UnitLoad.objects.filter(
        grove_id__in=grove_ids).values_list("grove_id", "unit_id", "reported_at", "cpu_milli", "memory_bytes")}
    return groves, [(grove_id, unit_id, cpu, memory, *loads.get((grove_id, unit_id), (None, 0, 0)))
                    for grove_id, unit_id, cpu, memory in units if (grove_id, unit_id) in keys]


def ledger_write(plans: list[Plan], ledger: dict, lost: set[int]) -> None:
    """The ledger rows of the units these placements took, in one upsert (values computed under the lock)."""
    for plan in plans:
        if plan.index in lost or plan.unit_id is None:
            continue
        entry = ledger[(plan.facts.id, plan.unit_id)]
        entry[1] += plan.requirement.resources.cpu_milli
        entry[2] += plan.requirement.resources.memory_bytes
        entry[3] = True
    rows = [(grove_id, unit_id, at, cpu, memory) for (grove_id, unit_id), (at, cpu, memory, touched)
            in sorted(ledger.items()) if touched]
    if not rows:
        return
    if connection.vendor == "postgresql":
        # One statement over five arrays (no model objects for thousands of rows), in lock order.
        grove_ids, unit_ids, tokens, cpus, memories = zip(*rows, strict=True)
        with connection.cursor() as cursor:
            cursor.execute(_sql_ledger_upsert(), [pg_array(grove_ids), pg_array(unit_ids), pg_array(tokens),
                                                  pg_array(cpus), pg_array(memories)])
        return
    UnitLoad.objects.bulk_create(
        [UnitLoad(grove_id=grove_id, unit_id=unit_id, reported_at=at, cpu_milli=cpu, memory_bytes=memory)
         for grove_id, unit_id, at, cpu, memory in rows],
        update_conflicts=True, unique_fields=["grove", "unit_id"],
        update_fields=["reported_at", "cpu_milli", "memory_bytes"])
