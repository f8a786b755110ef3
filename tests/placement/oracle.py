"""The hand-written PostgreSQL candidate query placement used before the fleet snapshot, kept as the
oracle the snapshot is checked against (tests/placement/test_fleet.py): the same selection and ranking,
computed by the database from the rows themselves. It encodes the compatibility rules itself, in SQL
(it is the check on ``rules.RULES`` and the snapshot's indexes, not a third copy of them), and answers in
the snapshot's own shapes (``fleet.CandidateSet`` of ``rules.GroveFacts``) so results compare directly.
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import replace
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.utils import timezone

from apps.accelerators import selectors as accelerator_selectors
from apps.accelerators.models import AcceleratorClaim
from apps.accelerators.vocabulary import ClaimState
from apps.groves.models import AcceleratorInventoryItem, PlacementUnit
from apps.placement.fleet import Candidate, CandidateSet
from apps.placement.requirements import ExecutionRequirement
from apps.placement.rules import MAX_GROVE_PLATFORMS, NO_PLATFORM_RANK, GroveFacts
from apps.placement.scoring import ring_point

# Totals in a decision are exact up to this many Groves ("200+" beyond): counting every eligible Grove of
# a large fleet would make each decision's cost grow with the fleet.
COUNT_CAP = 200
_CAP = "EXISTS (SELECT 1 FROM groves_grovecapability c WHERE c.grove_id = g.id AND c.kind = '{kind}' AND {test})"
_COLUMNS = ("g.id, g.slug, g.substrate, g.roles, g.platforms, g.isolation_modes, g.change_kinds, g.last_heartbeat_at, "
            "g.last_polled_at, g.last_polled_at >= %(ready_cutoff)s")


def _json(value):
    return json.loads(value) if isinstance(value, str | bytes) else value


def needed_substrate(requirement: ExecutionRequirement) -> set[str]:
    """Substrates that could satisfy the substrate, trust and host-process rules at all (empty = none can)."""
    allowed = {"kubernetes", "native"}
    if requirement.substrate:
        allowed &= {requirement.substrate}
    if requirement.trust == "untrusted":
        allowed &= {"kubernetes"}
    if requirement.compatibility.isolation == "host_process":
        allowed &= {"native"}
    return allowed


def _rows_to_candidates(rows) -> list[Candidate]:
    """Candidates with the Grove columns as facts; the reported units, devices and APIs are filled in after."""
    out = []
    for (eligible, grove_id, slug, substrate, roles, platforms, isolation, kinds, heartbeat, polled, ready, prank,
         fit) in rows:
        facts = GroveFacts(id=str(grove_id), slug=slug, substrate=substrate, roles=tuple(_json(roles)),
                           platforms=tuple(_json(platforms)), isolation_modes=tuple(_json(isolation)),
                           change_kinds=tuple(_json(kinds)), last_heartbeat_at=heartbeat, last_polled_at=polled,
                           ready=bool(ready))
        out.append(Candidate(facts=facts, eligible=eligible,
                             platform_rank=NO_PLATFORM_RANK if prank is None else prank, fits_cpu_memory=fit))
    return out


def sql_candidates(requirement: ExecutionRequirement, *, limit: int, role_only: bool = False,
                   start: int = 0, with_others: bool = True) -> CandidateSet:
    """The ``limit`` first eligible Groves in sampling order, a sample of the others, and capped totals.

    Sampling order (``fleet.FleetIndex.select``): Groves with room first, then by platform position, the wanted
    accelerator API first, then round the ring from ``start`` (each Grove's point is a hash of its id).

    The compatibility rules are jsonb containment tests on the Grove's own role, change-kind, isolation
    and platform lists plus the substrate column (no per-row subplans). The first round trip asks only for
    Groves with the best possible rank key (first platform accepted, a unit that fits, the accelerator
    API when one is wanted) in slug order: PostgreSQL walks the slug index and stops after ``limit``
    rows, and those rows *are* the top of the ranking. Only when fewer exist does a second query rank
    every eligible Grove. Totals are counted up to ``COUNT_CAP``. ``role_only`` ranks every Grove holding
    the role (the shadow-mode fallback). Hand-written SQL: the ORM's query building alone cost more than
    the whole decision.
    """
    compat = requirement.compatibility
    params: dict = {
        "cutoff": timezone.now() - timedelta(seconds=settings.GROVE_STALE_AFTER_S), "limit": limit,
        "ready_cutoff": timezone.now() - timedelta(seconds=settings.GROVE_READY_WITHIN_S),
        "cap": COUNT_CAP, "substrates": sorted(needed_substrate(requirement)),
        "allowed": list(compat.platform.allowed), "cpu": requirement.resources.cpu_milli,
        "memory": requirement.resources.memory_bytes,
        "api": requirement.accelerators.api if requirement.accelerators and requirement.accelerators.api else "",
        "role_json": json.dumps([requirement.family]), "change_kind_json": json.dumps([compat.change_kind]),
        "isolation_json": json.dumps([compat.isolation]),
    }
    fresh = "g.enabled AND g.last_heartbeat_at >= %(cutoff)s"
    ready = "coalesce(g.last_polled_at >= %(ready_cutoff)s, false)"  # the readiness rule
    if role_only:
        condition = f"g.roles @> %(role_json)s::jsonb AND {ready}"
    elif params["substrates"]:
        condition = " AND ".join([
            "g.substrate = ANY(%(substrates)s)",
            "g.roles @> %(role_json)s::jsonb",
            "g.change_kinds @> %(change_kind_json)s::jsonb",
            "g.isolation_modes @> %(isolation_json)s::jsonb",
            *(["g.platforms ?| %(allowed)s::text[]"] if compat.platform.allowed else []),
            ready,
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
    # One round trip: the best-key rows, a sample of the others, and a last row carrying both capped counts.
    first = f"""
        (SELECT true, {_COLUMNS}, 0, true, 0 FROM groves_grove g
          WHERE {fresh} AND {condition} AND {best_platform} AND {fits} AND {has_api}
          ORDER BY g.slug LIMIT %(limit)s)
        UNION ALL
        (SELECT false, {_COLUMNS}, {NO_PLATFORM_RANK}, false, 0 FROM groves_grove g
          WHERE {fresh} AND NOT ({condition}) ORDER BY g.slug LIMIT %(limit)s)
        UNION ALL
        SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
               (SELECT count(*) FROM (SELECT 1 FROM groves_grove g WHERE {fresh} AND {condition}
                                       LIMIT %(cap)s) e)::int, NULL,
               (SELECT count(*) FROM (SELECT 1 FROM groves_grove g WHERE {fresh} AND NOT ({condition})
                                       LIMIT %(cap)s) i)::int"""
    with connection.cursor() as cursor:
        cursor.execute(first, params)
        *rows, totals = cursor.fetchall()
        eligible_total, ineligible_total = totals[11], totals[13]
        result = CandidateSet(eligible=_rows_to_candidates(r[:13] for r in rows if r[0]),
                              others=_rows_to_candidates(r[:13] for r in rows if not r[0]),
                              eligible_total=eligible_total, ineligible_total=ineligible_total, cap=COUNT_CAP)
        cursor.execute(f"""
            SELECT true, {_COLUMNS}, {rank} AS platform_rank, {fits} AS fits, {has_api} AS api FROM groves_grove g
             WHERE {fresh} AND {condition}""", params)
        ranked = sorted(cursor.fetchall(), key=lambda row: (
            not row[-2], row[-3], not row[-1], (ring_point(str(row[1])) - start) % 2**64))
        result.eligible = _rows_to_candidates(row[:-1] for row in ranked[:limit])
    # Reported units (allocatable and free), accelerator units, devices and Host's claims, read from the
    # rows, as resource admission reads them.
    ids = [c.facts.id for c in result.eligible + result.others]
    inputs = _admission_inputs(ids)
    amounts = defaultdict(list)
    for grove_id, unit_id, cpu, cpu_free, memory, memory_free in PlacementUnit.objects.filter(
            grove_id__in=ids).order_by("grove_id", "unit_id").values_list(
            "grove_id", "unit_id", "cpu_milli_allocatable", "cpu_milli_free", "memory_bytes_allocatable",
            "memory_bytes_free"):
        amounts[str(grove_id)].append((unit_id, cpu, cpu_free, memory, memory_free))

    def completed(candidate: Candidate) -> Candidate:
        units, devices, claimed = inputs[candidate.facts.id]
        rows = amounts[candidate.facts.id]
        return replace(candidate, facts=replace(
            candidate.facts, accelerator_units=tuple(units), devices=tuple(devices),
            claimed=tuple(sorted(claimed.items())),
            unit_free=tuple((unit_id, cpu_free, memory_free) for unit_id, _c, cpu_free, _m, memory_free in rows),
            unit_allocatable=tuple((unit_id, cpu, memory) for unit_id, cpu, _cf, memory, _mf in rows)))

    result.eligible = [completed(c) for c in result.eligible]
    result.others = [completed(c) for c in result.others]
    return result


def _admission_inputs(grove_ids: list) -> dict:
    """Units, devices and active claims of several Groves in three queries, through the accelerators app's
    own row readers (what the fleet snapshot uses), keyed by Grove id."""
    units, devices, claims = defaultdict(list), defaultdict(list), defaultdict(list)
    for row in PlacementUnit.objects.filter(grove_id__in=grove_ids).only("grove_id", "unit_id", "accelerators"):
        units[str(row.grove_id)].append(row)
    for row in AcceleratorInventoryItem.objects.filter(grove_id__in=grove_ids):
        devices[str(row.grove_id)].append(row)
    for claim in AcceleratorClaim.objects.filter(grove_id__in=grove_ids, state=ClaimState.ACTIVE).only(
            "grove_id", "unit_id", "allocations"):
        claims[str(claim.grove_id)].append(claim)
    return {str(grove_id): (accelerator_selectors.units_from_rows(units[str(grove_id)]),
                            accelerator_selectors.devices_from_rows(devices[str(grove_id)]),
                            accelerator_selectors.claimed_counts(claims[str(grove_id)]))
            for grove_id in grove_ids}
