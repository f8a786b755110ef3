"""Reads behind the staff pages, the staff API and the CLI: every figure is one bounded query (no N+1).

The "would have refused" report reads the placement table: today a refusal is stored only as a shadow
placement (``would_refuse``: incompatible, placed anyway because enforcement was off); a placement
stored as *refused* (enforced, with incompatibilities) is picked up by the same filter the day such rows
exist. Nodes that failed at dispatch with a refusal code are the other record of refusals today.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from django.db import connection
from django.db.models import Count, Prefetch, Q, QuerySet, Sum
from django.db.models.fields.json import KeyTransform
from django.db.models.functions import TruncDay
from django.utils import timezone

from apps.accelerators import rules as accelerator_rules
from apps.accelerators.choices import ClaimState
from apps.accelerators.models import AcceleratorClaim, AcceleratorEntitlement, AcceleratorUsage
from apps.dispatch.vocabulary import JobStatus
from apps.groves.models import AcceleratorInventoryItem, CapacityReport, Grove, PlacementUnit
from apps.pipelines.models import PipelineNode, PipelineRun
from apps.pipelines.vocabulary import NodeStatus
from apps.placement.models import ExecutionPlacement
from apps.workloads.selectors import generations_latest_for_grove

# Why a node failed at dispatch when placement or admission refused it (pipelines records exc.code).
NODE_REFUSAL_REASONS = (
    "placement_refused", "no_eligible_grove", "never_placeable", "placed_grove_gone", "placed_grove_incompatible",
    "accelerator_api_mismatch", "accelerator_memory_insufficient", "accelerator_memory_unknown",
    "accelerator_none_reported", "accelerator_unavailable", "accelerator_vendor_mismatch",
    "accelerator_budget_exhausted", "accelerator_concurrency_exceeded", "accelerator_not_entitled",
)
LIVE_JOBS = (JobStatus.ASSIGNED, JobStatus.CLAIMED, JobStatus.RUNNING)
# Refused or would-refuse. Its SQL is the predicate of the partial index in staff migration 0002 (keep
# them in step: PostgreSQL uses that index only when the query implies its predicate).
REFUSED = Q(would_refuse=True) | Q(decision__incompatibilities__0__isnull=False, enforced=True)
REFUSED_SQL = "(p.would_refuse OR ((p.decision #> '{incompatibilities,0}') IS NOT NULL AND p.enforced))"


# --- Groves -------------------------------------------------------------------------------------

def grove_table_rows() -> QuerySet[Grove]:
    """Groves with exactly the related rows the list renders (two prefetches, whatever the page size)."""
    return Grove.objects.prefetch_related(
        Prefetch("placement_units", queryset=PlacementUnit.objects.only(
            "grove_id", "unit_id", "cpu_milli_allocatable", "cpu_milli_free", "memory_bytes_allocatable",
            "memory_bytes_free", "accelerators")),
        Prefetch("accelerators", queryset=AcceleratorInventoryItem.objects.only(
            "grove_id", "inventory_id", "vendor", "model", "apis", "memory_bytes", "memory_kind",
            "memory_enforced", "share_mode")),
    ).defer("capacity", "log_tail")


@dataclass
class GroveDetail:
    grove: Grove
    reports: list[CapacityReport]
    units: list[PlacementUnit]
    devices: list[dict]
    generations: list
    running_jobs: list
    placements_total: int


def grove_detail(*, slug: str) -> GroveDetail | None:
    grove = Grove.objects.filter(slug=slug).first()
    if grove is None:
        return None
    units = list(grove.placement_units.all())
    slots = _slots_by_inventory(units)
    devices = [
        {"item": item, "allocatable": slots[item.inventory_id][0], "free": slots[item.inventory_id][1]}
        for item in grove.accelerators.all()
    ]
    return GroveDetail(
        grove=grove,
        reports=list(grove.reports.only("grove_id", "received_at", "version", "digest")[:10]),
        units=units,
        devices=devices,
        generations=list(generations_latest_for_grove(grove)) if grove.substrate == "native" else [],
        # The nodes whose current job runs here (a Grove job knows its node only by id, so read from the node).
        running_jobs=list(PipelineNode.objects.filter(current_job__grove=grove, current_job__status__in=LIVE_JOBS)
                          .select_related("run", "current_job").order_by("-current_job__created_at")[:50]),
        placements_total=ExecutionPlacement.objects.filter(grove=grove).count(),
    )


def _slots_by_inventory(units) -> dict[str, list[int]]:
    """inventory id → [allocatable, free] summed over the units that report slots of it."""
    slots: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for unit in units:
        for slot in unit.accelerators or []:
            entry = slots[slot.get("inventory_id", "")]
            entry[0] += int(slot.get("allocatable") or 0)
            entry[1] += int(slot.get("free") or 0)
    return slots


# --- accelerator inventory ------------------------------------------------------------------------

@dataclass
class InventoryGroup:
    api: str
    vendor: str
    model: str
    memory_bytes: int | None
    memory_kind: str
    share_mode: str
    items: int = 0
    groves: set = field(default_factory=set)
    allocatable: int = 0
    free: int = 0

    @property
    def used(self) -> int:
        return max(0, self.allocatable - self.free)


def inventory_groups() -> list[InventoryGroup]:
    """Reported accelerators across Groves grouped by api/vendor/model: how many inventory items, and the
    devices they stand for (an item may stand for several allocatable slots, e.g. a shared chip)."""
    slots: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    for grove_id, reported in PlacementUnit.objects.exclude(accelerators=[]).values_list("grove_id", "accelerators"):
        for slot in reported or []:
            entry = slots[(grove_id, slot.get("inventory_id", ""))]
            entry[0] += int(slot.get("allocatable") or 0)
            entry[1] += int(slot.get("free") or 0)
    groups: dict[tuple, InventoryGroup] = {}
    for row in AcceleratorInventoryItem.objects.values_list(
            "grove_id", "inventory_id", "vendor", "model", "apis", "memory_bytes", "memory_kind", "share_mode"):
        grove_id, inventory_id, vendor, model, apis, memory, memory_kind, share_mode = row
        api = ",".join(apis or []) or "—"
        key = (api, vendor, model, memory, memory_kind, share_mode)
        group = groups.get(key) or groups.setdefault(key, InventoryGroup(api, vendor, model, memory, memory_kind,
                                                                         share_mode))
        group.items += 1
        group.groves.add(grove_id)
        allocatable, free = slots.get((grove_id, inventory_id), (0, 0))
        group.allocatable += allocatable
        group.free += free
    return sorted(groups.values(), key=lambda g: (g.api, g.vendor, g.model))


@dataclass
class TeamUse:
    entitlement: AcceleratorEntitlement
    concurrent: int
    used_s: float
    refusals: int

    @property
    def budget_fraction(self) -> float | None:
        budget = self.entitlement.budget_accelerator_seconds
        if not budget:
            return None
        return min(1.0, self.used_s / budget)


def team_usage(*, now: datetime | None = None) -> list[TeamUse]:
    """Per entitlement: accelerators in use now, accelerator-seconds used this period, refusals this
    period. Four grouped queries whatever the number of teams; pending (not yet accrued) time of active
    claims is counted as the budget check counts it."""
    now = now or timezone.now()
    entitlements = list(AcceleratorEntitlement.objects.all())
    if not entitlements:
        return []
    earliest = min(accelerator_rules.period_start(now, e.period) for e in entitlements)
    active = list(AcceleratorClaim.objects.filter(state=ClaimState.ACTIVE)
                  .values_list("team", "api", "vendor", "count", "accrued_through"))
    ledger = list(AcceleratorUsage.objects.filter(day__gte=earliest).values("team", "api", "vendor", "day")
                  .annotate(ms=Sum("accelerator_ms")).values_list("team", "api", "vendor", "day", "ms"))
    refused = dict(ExecutionPlacement.objects.filter(REFUSED, created_at__date__gte=earliest)
                   .exclude(requirement__accelerators=None).values("team").annotate(n=Count("id"))
                   .values_list("team", "n"))
    rows = []
    for entitlement in entitlements:
        start: date = accelerator_rules.period_start(now, entitlement.period)
        began = datetime.combine(start, datetime.min.time(), tzinfo=now.tzinfo)

        def matches(team, api, vendor, e=entitlement):
            return team == e.team and (not e.api or api == e.api) and (not e.vendor or vendor == e.vendor)

        concurrent = sum(count for team, api, vendor, count, _ in active if matches(team, api, vendor))
        pending = sum(max(0.0, (now - max(through, began)).total_seconds()) * count
                      for team, api, vendor, count, through in active if matches(team, api, vendor))
        used_ms = sum(ms or 0 for team, api, vendor, day, ms in ledger if day >= start and matches(team, api, vendor))
        rows.append(TeamUse(entitlement, concurrent, used_ms / 1000 + pending, refused.get(entitlement.team, 0)))
    return rows


# --- placements -----------------------------------------------------------------------------------

def placement_rows(*, whole: bool = False) -> QuerySet[ExecutionPlacement]:
    """Placements newest first. For the pages: the list's columns and, of the decision, only its
    ``incompatibilities`` (the decision's candidate list and the requirement are the large JSON of a row,
    one entry per Grove considered). ``whole``: every column, for the API, which returns whole rows."""
    rows = ExecutionPlacement.objects.order_by("-created_at", "-id")
    if whole:
        return rows
    return rows.only("id", "subject_type", "subject_id", "grove_id", "grove_slug", "selected_platform", "chooser",
                     "enforced", "would_refuse", "team", "created_at").annotate(
        incompatibilities=KeyTransform("incompatibilities", "decision"))


def subjects_describe(placements) -> dict[int, dict]:
    """placement pk → {"label", "status", "run_id", "node_id"} for the subjects on one page: one query."""
    node_ids = [int(p.subject_id) for p in placements
                if p.subject_type == "pipeline_node" and str(p.subject_id).isdigit()]
    nodes = {str(pk): (node_id, status, run_id, kind) for pk, node_id, status, run_id, kind in
             PipelineNode.objects.filter(pk__in=node_ids).values_list("pk", "node_id", "status", "run_id",
                                                                     "run__kind")}
    described = {}
    for placement in placements:
        node = nodes.get(str(placement.subject_id)) if placement.subject_type == "pipeline_node" else None
        if node:
            node_id, status, run_id, kind = node
            described[placement.pk] = {"label": f"{kind} node {node_id}", "status": status, "run_id": run_id,
                                       "node_id": node_id}
        else:
            described[placement.pk] = {"label": f"{placement.get_subject_type_display()} {placement.subject_id}",
                                       "status": "", "run_id": None, "node_id": None}
    return described


def placement_node(placement: ExecutionPlacement) -> PipelineNode | None:
    if placement.subject_type != "pipeline_node" or not str(placement.subject_id).isdigit():
        return None
    return (PipelineNode.objects.select_related("run", "current_job")
            .filter(pk=int(placement.subject_id)).first())


def refused_placements(*, whole: bool = False) -> QuerySet[ExecutionPlacement]:
    return placement_rows(whole=whole).filter(REFUSED)


# --- runs -------------------------------------------------------------------------------------------

def run_rows() -> QuerySet[PipelineRun]:
    return PipelineRun.objects.only("id", "kind", "status", "environment", "team", "reason", "created_at",
                                    "finished_at").order_by("-created_at")


def run_node_counts(run_ids) -> dict:
    """run id → {"total", "done", "failed"} for one page of runs, in one grouped query. Counting per page
    (not as an annotation on the list) keeps the list an index scan: an aggregate over every run's nodes
    would have to finish before the LIMIT could apply."""
    rows = (PipelineNode.objects.filter(run_id__in=list(run_ids)).values("run_id").annotate(
        total=Count("id"), done=Count("id", filter=Q(status=NodeStatus.SUCCEEDED)),
        failed=Count("id", filter=Q(status__in=[NodeStatus.FAILED, NodeStatus.TIMED_OUT]))))
    return {row["run_id"]: row for row in rows}


def run_detail(*, run_id) -> tuple[PipelineRun, list[PipelineNode], dict[str, ExecutionPlacement]] | None:
    run = PipelineRun.objects.filter(pk=run_id).first()
    if run is None:
        return None
    nodes = list(run.nodes.select_related("grove", "current_job", "seeded_from_run").order_by("position"))
    placements = {p.subject_id: p for p in ExecutionPlacement.objects.filter(
        subject_type="pipeline_node", subject_id__in=[str(n.pk) for n in nodes]).only(
        "id", "subject_id", "grove_slug", "selected_platform", "would_refuse", "chooser")}
    return run, nodes, placements


# --- the "would have refused" report ----------------------------------------------------------------

@dataclass
class RefusalReport:
    since: datetime
    until: datetime
    total: int
    by_code: list[tuple[str, int]]
    by_grove: list[tuple[str, int]]
    by_team: list[tuple[str, int]]
    trend: list[tuple[date, int]]
    node_refusals: list[tuple[str, int]]


def refusal_report(*, since: datetime, until: datetime, limit: int = 20) -> RefusalReport:
    window = ExecutionPlacement.objects.filter(REFUSED, created_at__gte=since, created_at__lt=until)
    total = window.count()
    by_grove = list(window.values("grove_slug").annotate(n=Count("id")).order_by("-n", "grove_slug")
                    .values_list("grove_slug", "n")[:limit])
    by_team = [(team or "(no team)", n) for team, n in window.values("team").annotate(n=Count("id"))
               .order_by("-n", "team").values_list("team", "n")[:limit]]
    per_day = dict(window.annotate(day=TruncDay("created_at")).values("day").annotate(n=Count("id"))
                   .values_list("day", "n"))
    counts = {(d.date() if isinstance(d, datetime) else d): n for d, n in per_day.items()}
    last_day = (until - timedelta(microseconds=1)).date()  # ``until`` is exclusive
    days = (last_day - since.date()).days + 1
    trend = [(since.date() + timedelta(days=i), counts.get(since.date() + timedelta(days=i), 0))
             for i in range(max(1, days))]
    nodes = list(PipelineNode.objects.filter(status=NodeStatus.FAILED, reason__in=NODE_REFUSAL_REASONS,
                                             finished_at__gte=since, finished_at__lt=until)
                 .values("reason").annotate(n=Count("id")).order_by("-n").values_list("reason", "n"))
    return RefusalReport(since=since, until=until, total=total,
                         by_code=refusal_codes(since=since, until=until, limit=limit),
                         by_grove=by_grove, by_team=by_team, trend=trend, node_refusals=nodes)


def refusal_codes(*, since: datetime, until: datetime, limit: int = 50) -> list[tuple[str, int]]:
    """Counts per incompatibility code: the decision's array is unnested in SQL (one query)."""
    table = ExecutionPlacement._meta.db_table
    if connection.vendor == "postgresql":
        elements = "jsonb_array_elements(p.decision -> 'incompatibilities') AS e"
        code = "e ->> 'code'"
        refused = REFUSED_SQL
    else:
        elements = "json_each(p.decision, '$.incompatibilities') AS e"
        code = "json_extract(e.value, '$.code')"
        refused = "(p.would_refuse OR p.enforced)"  # rows without incompatibilities add no element anyway
    sql = (f"SELECT {code} AS code, COUNT(*) AS n FROM {table} p, {elements} "
           f"WHERE {refused} AND p.created_at >= %s AND p.created_at < %s "
           f"GROUP BY {code} ORDER BY n DESC, code LIMIT %s")
    with connection.cursor() as cursor:
        cursor.execute(sql, [since, until, limit])
        return [(row[0], row[1]) for row in cursor.fetchall()]
