"""Reads for accelerators: admission inputs from rows (reported units and inventory, Host's active claims; the
fleet snapshot reads the rows) and usage."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, date, datetime, time

from django.db.models import F, QuerySet, Sum

from apps.accelerators import rules
from apps.accelerators.models import AcceleratorClaim, AcceleratorEntitlement, AcceleratorUsage
from apps.accelerators.vocabulary import ClaimState
from apps.groves.models import AcceleratorInventoryItem, PlacementUnit


def units_from_rows(rows: Iterable[PlacementUnit]) -> list[rules.Unit]:
    return [rules.Unit(unit_id=row.unit_id,
                       slots=tuple(rules.Slot(slot["inventory_id"], slot["allocatable"], slot["free"])
                                   for slot in row.accelerators))
            for row in rows]


def devices_from_rows(rows: Iterable[AcceleratorInventoryItem]) -> list[rules.Device]:
    return [rules.Device(inventory_id=row.inventory_id, vendor=row.vendor, apis=tuple(row.apis),
                         memory_bytes=row.memory_bytes, memory_kind=row.memory_kind,
                         memory_enforced=row.memory_enforced, share_mode=row.share_mode, model=row.model)
            for row in rows]


def claimed_counts(claims: Iterable[AcceleratorClaim]) -> dict[tuple[str, str], int]:
    claimed: dict[tuple[str, str], int] = defaultdict(int)
    for claim in claims:
        for allocation in claim.allocations:
            claimed[(claim.unit_id, allocation["inventory_id"])] += allocation["count"]
    return dict(claimed)


def entitlement_for(*, team: str, api: str, vendor: str) -> QuerySet[AcceleratorEntitlement]:
    """The team's entitlements that cover this api/vendor, most specific first."""
    return (AcceleratorEntitlement.objects.filter(team=team, api__in=[api, ""], vendor__in=[vendor, ""])
            .order_by(F("api").desc(), F("vendor").desc()))


def entitlement_scope(entitlement: AcceleratorEntitlement) -> dict:
    scope: dict = {"team": entitlement.team}
    if entitlement.api:
        scope["api"] = entitlement.api
    if entitlement.vendor:
        scope["vendor"] = entitlement.vendor
    return scope


def active_count(entitlement: AcceleratorEntitlement) -> int:
    return (AcceleratorClaim.objects.filter(state=ClaimState.ACTIVE, **entitlement_scope(entitlement))
            .aggregate(total=Sum("count"))["total"] or 0)


def usage_seconds(entitlement: AcceleratorEntitlement, *, now: datetime) -> float:
    """Accelerator-seconds used in the entitlement's current period: the ledger plus the not yet
    accrued time of active claims (so a claim cannot slip in between two beat runs)."""
    start: date = rules.period_start(now, entitlement.period)
    scope = entitlement_scope(entitlement)
    ledger_ms = (AcceleratorUsage.objects.filter(day__gte=start, **scope)
                 .aggregate(total=Sum("accelerator_ms"))["total"] or 0)
    period_began = datetime.combine(start, time.min, tzinfo=UTC)
    pending = 0.0
    for claim in AcceleratorClaim.objects.filter(state=ClaimState.ACTIVE, **scope).only(
            "count", "accrued_through"):
        since = max(claim.accrued_through, period_began)
        pending += max(0.0, (now - since).total_seconds()) * claim.count
    return ledger_ms / 1000 + pending
