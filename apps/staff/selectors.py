"""Reads behind the staff pages, the staff API and the CLI: every figure is one bounded query (no N+1).

The "would have refused" report counts refused placements: today a refusal is stored only as a shadow
placement (``would_refuse``: incompatible, placed anyway because enforcement was off); a placement
stored as *refused* (enforced, with incompatibilities) is picked up by the same filter the day such rows
exist. Its counts read the daily rollup (``models.RefusalRollup``) for the whole days it covers and the
placements for the rest of the window; its list of subjects pages over the placements themselves. It gives
refused and would-refuse apart (``OUTCOME_SQL``), and counts only real Groves as Groves (a refusal placed on
no Grove is ``no_grove``). Nodes that failed at dispatch with a refusal code are the other record of
refusals today.

Every read of team-owned work here takes the acting user first (``user``) and narrows by the user's teams
unless the role spans all teams (``apps.accounts.selectors.visible``): runs, nodes, placements, compute
jobs, workloads and the refusal report's subjects. One object of another team is refused as the API
refuses it (403 ``team_forbidden``). Aggregates (a Grove's running jobs, the refusal report, per-team
use) count other teams' work without naming it (``team_label``). The staff pages, their CSV exports and
the staff API call only these; nothing under ``apps/staff`` reads a team-owned model without the actor.
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import NamedTuple

from django.conf import settings
from django.db import connection
from django.db.models import Count, Prefetch, Q, QuerySet, Sum
from django.db.models.fields.json import KeyTransform
from django.utils import timezone

from apps.accelerators import rules as accelerator_rules
from apps.accelerators.choices import ClaimState
from apps.accelerators.models import AcceleratorClaim, AcceleratorEntitlement, AcceleratorUsage
from apps.accounts.selectors import acts_for_any_team, team_authorize, team_label, user_team_slugs, visible
from apps.compute.models import ComputeJob
from apps.compute.selectors import compute_jobs_visible
from apps.core.db import sql_from_meta
from apps.core.errors import NotFound
from apps.dispatch.models import GroveJob
from apps.dispatch.vocabulary import JobStatus
from apps.groves.models import AcceleratorInventoryItem, CapacityReport, Grove, PlacementUnit
from apps.pipelines.models import PipelineNode, PipelineRun
from apps.pipelines.vocabulary import NodeStatus
from apps.placement.models import ExecutionPlacement
from apps.staff.models import Grain, RefusalRollup, RollupWatermark
from apps.workloads.selectors import generations_latest_for_grove

# Why a node failed at dispatch when placement or admission refused it (pipelines records exc.code).
NODE_REFUSAL_REASONS = (
    "placement_refused", "no_eligible_grove", "never_placeable", "placed_grove_gone", "placed_grove_incompatible",
    "accelerator_api_mismatch", "accelerator_memory_insufficient", "accelerator_memory_unknown",
    "accelerator_none_reported", "accelerator_unavailable", "accelerator_vendor_mismatch",
    "accelerator_budget_exhausted", "accelerator_concurrency_exceeded", "accelerator_not_entitled",
)
LIVE_JOBS = (JobStatus.ASSIGNED, JobStatus.CLAIMED, JobStatus.RUNNING)
# A Grove's page says "N placements" up to this many, then "N+" (an exact count of a busy Grove's history
# would read every one of its rows for one figure).
PLACEMENTS_COUNTED = 10_000
# Refused or would-refuse. Its SQL is the predicate of the partial index in staff migration 0002 (keep
# them in step: PostgreSQL uses that index only when the query implies its predicate).
# Refused or would-refuse: a stored refusal (``outcome`` refused: incompatible with enforcement on, never fits,
# policy) or a shadow-mode placement enforcement would have refused (apps/placement/outcome.py).
REFUSED = Q(would_refuse=True) | Q(outcome="refused") | Q(decision__incompatibilities__0__isnull=False, enforced=True)
# A ``sql_from_meta`` template over ``p``, the placement table ({{ }} is a brace in the SQL).
REFUSED_SQL = ("(p.{p.would_refuse} OR p.{p.outcome} = 'refused' OR "
               "((p.{p.decision} #> '{{incompatibilities,0}}') IS NOT NULL AND p.{p.enforced}))")
REFUSAL_ROLLUP = "refusals"  # the rollup's watermark row
ROLLUP_NEVER = datetime(1970, 1, 1, tzinfo=UTC)  # a watermark that has never moved: the next run rebuilds


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
    # Live jobs here of teams the reader does not belong to: a count, never their names.
    running_elsewhere: int = 0

    @property
    def placements_capped(self) -> bool:
        return self.placements_total >= PLACEMENTS_COUNTED


def grove_detail(user, *, slug: str) -> GroveDetail | None:
    """A Grove (not team-owned: every reader sees it) with the work on it that ``user`` may see; other
    teams' running jobs and placements are counted, not listed."""
    grove = Grove.objects.filter(slug=slug).first()
    if grove is None:
        return None
    units = list(grove.placement_units.all())
    slots = _slots_by_inventory(units)
    running, elsewhere = _running_here(user, grove)
    devices = [
        {"item": item, "allocatable": slots[item.inventory_id][0], "free": slots[item.inventory_id][1]}
        for item in grove.accelerators.all()
    ]
    return GroveDetail(
        grove=grove,
        reports=list(grove.reports.only("grove_id", "received_at", "version", "digest")[:10]),
        units=units,
        devices=devices,
        generations=[g for g in (generations_latest_for_grove(grove) if grove.substrate == "native" else [])
                     if _sees(user, g.workload.team)],
        running_jobs=running,
        running_elsewhere=elsewhere,
        placements_total=ExecutionPlacement.objects.filter(grove=grove).values("id")[:PLACEMENTS_COUNTED].count(),
    )


def _sees(user, team: str) -> bool:
    return acts_for_any_team(user) or (bool(team) and team in user_team_slugs(user))


def _running_here(user, grove: Grove) -> tuple[list[PipelineNode], int]:
    """(the nodes of ``user``'s teams whose current job is live on this Grove, newest job first; how many
    other live jobs there are). The Grove's live jobs are read first (a partial index, staff migration
    0004), then their nodes by id: as one join the planner may start from the node table (300,000 rows at
    the quality bar) when it misjudges the jobs."""
    jobs = list(GroveJob.objects.filter(grove=grove, status__in=LIVE_JOBS).order_by("-created_at")
                .values_list("id", flat=True)[:50])
    nodes = {node.current_job_id: node for node in PipelineNode.objects.filter(current_job_id__in=jobs)
             .select_related("run", "current_job")}
    mine = [nodes[job] for job in jobs if job in nodes and _sees(user, nodes[job].run.team)]
    return mine, len(jobs) - len(mine)


def grove_recent_placements(user, *, grove: Grove, limit: int = 20) -> list[ExecutionPlacement]:
    return list(placement_rows(user).filter(grove=grove)[:limit])


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
    groves: int = 0
    allocatable: int = 0
    free: int = 0
    # Reported by the demo's simulated Groves (nothing runs there): shown apart, never counted as inventory.
    simulated: bool = False
    # Of ``groves``, those not ready now (no poll or claim within GROVE_READY_WITHIN_S): placement passes
    # them over, so their devices are reported but not usable now.
    groves_not_ready: int = 0

    @property
    def used(self) -> int:
        return max(0, self.allocatable - self.free)


def _json_sql() -> tuple:
    """(the elements of a JSON array column as rows ``s``, the text of a key of element ``s``, "this array
    column is not empty") for this database."""
    if connection.vendor == "postgresql":
        return ((lambda column: f"jsonb_array_elements({column}) AS s"), (lambda key: f"(s ->> '{key}')"),
                (lambda column: f"{column} <> '[]'::jsonb"))
    return ((lambda column: f"json_each({column}) AS s"), (lambda key: f"json_extract(s.value, '$.{key}')"),
            (lambda column: f"json_array_length({column}) > 0"))


def inventory_groups(*, now: datetime | None = None) -> list[InventoryGroup]:
    """Reported accelerators across Groves grouped by api/vendor/model: how many inventory items, and the
    devices they stand for (an item may stand for several allocatable slots, e.g. a shared chip; the slot
    figures are those of the placement units that reference the item). Real Groves' groups first; what
    simulated Groves report is grouped apart (``simulated``), so a device that exists only on a demo Grove
    is never counted as inventory. One statement: the fleet's units and items are aggregated where they
    are, not read into Python (10,000 Groves at the quality bar)."""
    ready_after = (now or timezone.now()) - timedelta(seconds=settings.GROVE_READY_WITHIN_S)
    elements, key, nonempty = _json_sql()
    names = {"u": PlacementUnit, "i": AcceleratorInventoryItem, "g": Grove}
    group = sql_from_meta("g.{g.simulated}, i.{i.apis}, i.{i.vendor}, i.{i.model}, i.{i.memory_bytes}, "
                          "i.{i.memory_kind}, i.{i.share_mode}", **names)
    accelerators = sql_from_meta("u.{u.accelerators}", **names)
    sql = sql_from_meta(
        "WITH slots AS (SELECT u.{u.grove} AS grove_id, " + key("inventory_id") + " AS inventory_id, "
        "SUM(CAST(COALESCE(" + key("allocatable") + ", '0') AS BIGINT)) AS allocatable, "
        "SUM(CAST(COALESCE(" + key("free") + ", '0') AS BIGINT)) AS free "
        "FROM {u} u, " + elements(accelerators) + " WHERE " + nonempty(accelerators) + " "
        "GROUP BY u.{u.grove}, " + key("inventory_id") + ") "
        "SELECT " + group + ", COUNT(*), COUNT(DISTINCT i.{i.grove}), COALESCE(SUM(slots.allocatable), 0), "
        "COALESCE(SUM(slots.free), 0), COUNT(DISTINCT CASE WHEN g.{g.last_polled_at} IS NULL OR "
        "g.{g.last_polled_at} < %s THEN i.{i.grove} END) "
        "FROM {i} i JOIN {g} g ON g.{g.id} = i.{i.grove} LEFT JOIN slots ON slots.grove_id = i.{i.grove} "
        "AND slots.inventory_id = i.{i.inventory_id} GROUP BY " + group, **names)
    with connection.cursor() as cursor:
        cursor.execute(sql, [ready_after])
        rows = cursor.fetchall()
    groups = []
    for simulated, apis, vendor, model, memory, memory_kind, share_mode, count, groves, allocatable, free, \
            not_ready in rows:
        apis = json.loads(apis) if isinstance(apis, str) else apis
        groups.append(InventoryGroup(",".join(apis or []) or "—", vendor, model, memory, memory_kind, share_mode,
                                     items=count, groves=groves, allocatable=int(allocatable), free=int(free),
                                     simulated=bool(simulated), groves_not_ready=not_ready))
    return sorted(groups, key=lambda g: (g.simulated, g.api, g.vendor, g.model))


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


def team_usage(user, *, now: datetime | None = None) -> list[TeamUse]:
    """Per entitlement of ``user``'s teams (every team's for a role that spans all): accelerators in use
    now, accelerator-seconds used this period, refusals this period. Four grouped queries whatever the
    number of teams; pending (not yet accrued) time of active claims is counted as the budget check
    counts it."""
    now = now or timezone.now()
    entitlements = list(visible(AcceleratorEntitlement.objects.all(), user))
    if not entitlements:
        return []
    earliest = min(accelerator_rules.period_start(now, e.period) for e in entitlements)
    active = list(AcceleratorClaim.objects.filter(state=ClaimState.ACTIVE)
                  .values_list("team", "api", "vendor", "count", "accrued_through"))
    ledger = list(AcceleratorUsage.objects.filter(day__gte=earliest).values("team", "api", "vendor", "day")
                  .annotate(ms=Sum("accelerator_ms")).values_list("team", "api", "vendor", "day", "ms"))
    # A range on the column itself (not its date): the partial index of refusals serves it.
    since = datetime.combine(earliest, datetime.min.time(), tzinfo=now.tzinfo)
    refused = dict(ExecutionPlacement.objects.filter(REFUSED, created_at__gte=since)
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

def placement_rows(user, *, whole: bool = False) -> QuerySet[ExecutionPlacement]:
    """The placements ``user`` may see, newest first. For the pages: the list's columns and, of the
    decision, only its ``incompatibilities`` (the decision's candidate list and the requirement are the
    large JSON of a row, one entry per Grove considered). ``whole``: every column, for the API, which
    returns whole rows."""
    rows = visible(ExecutionPlacement.objects.order_by("-created_at", "-id"), user)
    if whole:
        return rows
    return rows.only("id", "subject_type", "subject_id", "grove_id", "grove_slug", "selected_platform", "chooser",
                     "enforced", "would_refuse", "outcome", "code", "team", "created_at").annotate(
        incompatibilities=KeyTransform("incompatibilities", "decision"))


def subjects_describe(placements) -> dict[int, dict]:
    """placement pk → {"label", "status", "run_id", "node_id"} for the subjects on one page: one query."""
    node_ids = [int(p.subject_id) for p in placements
                if p.subject_type == "pipeline_node" and str(p.subject_id).isdigit()]
    nodes = {str(pk): (node_id, status, run_id, kind) for pk, node_id, status, run_id, kind in
             PipelineNode.objects.filter(pk__in=node_ids).values_list("pk", "node_id", "status", "run_id",
                                                                     "run__kind")}
    jobs = compute_jobs_by_run({run_id for _n, _s, run_id, kind in nodes.values() if kind == "compute"})
    described = {}
    for placement in placements:
        node = nodes.get(str(placement.subject_id)) if placement.subject_type == "pipeline_node" else None
        if node:
            node_id, status, run_id, kind = node
            job = jobs.get(run_id)
            # Named by job and step, as the person who submitted it knows them (a compute run's nodes are steps).
            label = f"job {job[1]} · step {node_id}" if job else f"{kind} run {str(run_id)[:8]} · node {node_id}"
            described[placement.pk] = {"label": label, "status": status, "run_id": run_id,
                                       "node_id": node_id, "compute_job_id": job[0] if job else None}
        else:
            described[placement.pk] = {"label": f"{placement.get_subject_type_display()} {placement.subject_id}",
                                       "status": "", "run_id": None, "node_id": None}
    return described


def placement_node(placement: ExecutionPlacement) -> PipelineNode | None:
    if placement.subject_type != "pipeline_node" or not str(placement.subject_id).isdigit():
        return None
    return (PipelineNode.objects.select_related("run", "current_job")
            .filter(pk=int(placement.subject_id)).first())


def placement_get(user, *, pk) -> ExecutionPlacement:
    """One placement: 404 ``placement_not_found``, or 403 ``team_forbidden`` when ``user`` is not in its team."""
    placement = ExecutionPlacement.objects.select_related("grove").filter(pk=pk).first()
    if placement is None:
        raise NotFound("placement_not_found", f"No placement {pk}.")
    team_authorize(user, placement.team, what="this placement")
    return placement


def refused_placements(user, *, whole: bool = False) -> QuerySet[ExecutionPlacement]:
    return placement_rows(user, whole=whole).filter(REFUSED)


# --- runs -------------------------------------------------------------------------------------------

def run_rows(user) -> QuerySet[PipelineRun]:
    """The runs ``user`` may see, newest first, with the list's columns."""
    return visible(PipelineRun.objects, user).only("id", "kind", "status", "environment", "team", "reason",
                                                   "created_at", "finished_at").order_by("-created_at")


def run_node_counts(run_ids) -> dict:
    """run id → {"total", "done", "failed"} for one page of runs, in one grouped query. Counting per page
    (not as an annotation on the list) keeps the list an index scan: an aggregate over every run's nodes
    would have to finish before the LIMIT could apply."""
    rows = (PipelineNode.objects.filter(run_id__in=list(run_ids)).values("run_id").annotate(
        total=Count("id"), done=Count("id", filter=Q(status=NodeStatus.SUCCEEDED)),
        failed=Count("id", filter=Q(status__in=[NodeStatus.FAILED, NodeStatus.TIMED_OUT]))))
    return {row["run_id"]: row for row in rows}


OUTPUT_TAIL_LINES = 20


def output_tail(job: GroveJob | None) -> list[str]:
    """The last lines a step's current Grove job reported: what the compute-job and run pages show."""
    return list(job.log_tail or [])[-OUTPUT_TAIL_LINES:] if job is not None else []


def run_detail(user, *, run_id) -> tuple[PipelineRun, list[PipelineNode], dict[str, ExecutionPlacement]]:
    """A run with its nodes and their placements: 404 ``run_not_found``, or 403 ``team_forbidden`` when
    ``user`` is not in the run's team."""
    run = PipelineRun.objects.filter(pk=run_id).first()
    if run is None:
        raise NotFound("run_not_found", f"No pipeline run '{run_id}'.")
    team_authorize(user, run.team, what="this run")
    nodes = list(run.nodes.select_related("grove", "current_job", "current_job__grove", "seeded_from_run")
                 .order_by("position"))
    placements = {p.subject_id: p for p in ExecutionPlacement.objects.filter(
        subject_type="pipeline_node", subject_id__in=[str(n.pk) for n in nodes]).only(
        "id", "subject_id", "grove_slug", "selected_platform", "would_refuse", "chooser")}
    return run, nodes, placements


# --- compute jobs ------------------------------------------------------------------------------------------

def compute_job_rows(user) -> QuerySet[ComputeJob]:
    """The compute jobs ``user`` may see, newest first: the API list's selector
    (``apps.compute.selectors.compute_jobs_visible``), with the list's columns."""
    return compute_jobs_visible(user).only("id", "name", "environment", "team", "grove_pin", "created_at", "run_id",
                                           "run__status", "run__reason", "run__finished_at")


# --- a compute job ---------------------------------------------------------------------------------------

def compute_job_detail(user, *, job_id) -> ComputeJob:
    """One compute job: 404 ``compute_job_not_found``, or 403 ``team_forbidden``."""
    job = ComputeJob.objects.select_related("run").filter(pk=job_id).first()
    if job is None:
        raise NotFound("compute_job_not_found", f"No compute job '{job_id}'.")
    team_authorize(user, job.team, what="this compute job")
    return job


# --- the "would have refused" report ----------------------------------------------------------------

@dataclass
class RefusalReport:
    since: datetime
    until: datetime
    total: int
    by_code: list[tuple[str, int]]
    by_grove: list[tuple[str, int]]  # real Groves only (largest first, at most ``limit``)
    by_team: list[tuple[str, int]]
    trend: list[tuple[date, int]]
    node_refusals: list[tuple[str, int]]
    # Refused and would-refuse apart (the outcome keys of apps/placement/outcome.py): never one figure.
    refused: int = 0
    would_refuse: int = 0
    no_grove: int = 0  # placements refused onto no Grove: not a Grove of their own
    groves: int = 0  # how many Groves are involved (every one, not only the ``by_grove`` listed)


class RefusedSql(NamedTuple):
    """SQL fragments over ``placement_executionplacement p`` for this database: the refused predicate, the
    decision's incompatibilities as rows ``e``, an element's code, the row's UTC day, and its outcome key."""
    refused: str
    elements: str
    code: str
    day: str
    window: str  # p's creation time in [%s, %s)
    outcome: str  # 'refused' or 'would_refuse' (apps/placement/outcome.py's keys) of a row ``refused`` holds


# The outcome key of a refused / would-refuse row: a stored refusal (or an enforced row with incompatibilities,
# which ``REFUSED`` counts too) is refused; a shadow placement is would-refuse. Never one number for both.
OUTCOME_SQL = ("CASE WHEN p.{p.outcome} = 'refused' OR NOT p.{p.would_refuse} THEN 'refused' "
               "ELSE 'would_refuse' END")


def refused_sql() -> RefusedSql:
    parts: tuple[str, ...]
    if connection.vendor == "postgresql":
        parts = (REFUSED_SQL, "jsonb_array_elements(p.{p.decision} -> 'incompatibilities') AS e",
                 "e ->> 'code'", "(p.{p.created_at} AT TIME ZONE 'UTC')::date")
    else:  # SQLite (``make run``): the same predicate and elements in its JSON functions.
        parts = ("(p.{p.would_refuse} OR p.{p.outcome} = 'refused' OR "
                 "(json_array_length(p.{p.decision}, '$.incompatibilities') > 0 AND p.{p.enforced}))",
                 "json_each(p.{p.decision}, '$.incompatibilities') AS e",
                 "json_extract(e.value, '$.code')", "date(p.{p.created_at})")
    parts += ("p.{p.created_at} >= %s AND p.{p.created_at} < %s", OUTCOME_SQL)
    return RefusedSql(*(sql_from_meta(part, p=ExecutionPlacement) for part in parts))


def rollup_covers() -> date | None:
    """The first UTC day the refusal rollup does not cover completely (the days before it are read from the
    rollup's margins), or None when it has never run (every window is read from the placements)."""
    through = RollupWatermark.objects.filter(name=REFUSAL_ROLLUP).values_list("through", flat=True).first()
    if through is None or through == ROLLUP_NEVER:
        return None
    return through.astimezone(UTC).date()


class _Window(NamedTuple):
    """A report window split into whole UTC days the rollup covers, [first, last) read from the rollup,
    and the rest (at most a partial day at each end, and whatever is newer than the rollup) as [start, end)
    moments read from the placements."""
    first: date | None
    last: date | None
    raw: list[tuple[datetime, datetime]]


def _split(since: datetime, until: datetime) -> _Window:
    covers = rollup_covers()
    if covers is None:
        return _Window(None, None, [(since, until)])
    start_day = since.astimezone(UTC).date()
    first = start_day if _midnight(start_day) == since else start_day + timedelta(days=1)
    last = min(until.astimezone(UTC).date(), covers)
    if first >= last:
        return _Window(None, None, [(since, until)])
    raw = [(a, b) for a, b in ((since, _midnight(first)), (_midnight(last), until)) if a < b]
    return _Window(first, last, raw)


def _midnight(day: date) -> datetime:
    return datetime.combine(day, datetime.min.time(), tzinfo=UTC)


# Which rollup grain answers each key, and the column it is read from (``sql_from_meta`` templates over ``r``).
_GRAINS = {"total": (Grain.DAY, "''"), "day": (Grain.DAY, "r.{r.day}"),
           "grove_slug": (Grain.GROVE, "r.{r.grove_slug}"), "team": (Grain.TEAM, "r.{r.team}"),
           "code": (Grain.CODE, "r.{r.code}"), "outcome": (Grain.OUTCOME, "r.{r.outcome}")}


def _counts(window: _Window, *, key: str, limit: int | None = None, blank: bool | None = None) -> list[tuple]:
    """(key, count) over the window, largest first: the rollup's margin for its days plus the placements'
    aggregate for the rest, summed in one statement. ``key`` is ``grove_slug``, ``team``, ``day``, ``code``
    (which counts (placement, code) pairs), ``outcome`` or ``total``. ``blank``: only the "" key (True), or
    every key but "" (False) — a refusal's Grove of "" is no Grove, not a Grove called nothing."""
    sql = refused_sql()
    per_code = key == "code"
    grain, rollup_key = _GRAINS[key]
    raw_key = ({"total": "''", "code": sql.code, "day": sql.day, "outcome": sql.outcome}.get(key)
               or sql_from_meta(f"p.{{p.{key}}}", p=ExecutionPlacement))
    parts, params = [], []
    if window.first is not None:
        parts.append(sql_from_meta(f"SELECT {rollup_key} AS k, r.{{r.count}} AS n FROM {{r}} r WHERE "
                                   "r.{r.grain} = %s AND r.{r.day} >= %s AND r.{r.day} < %s", r=RefusalRollup))
        params += [grain, window.first, window.last]
    for start, end in window.raw:
        elements = f", {sql.elements}" if per_code else ""
        present = f" AND {sql.code} IS NOT NULL AND {sql.code} <> ''" if per_code else ""
        parts.append(f"SELECT {raw_key} AS k, COUNT(*) AS n FROM {ExecutionPlacement._meta.db_table} p{elements} "
                     f"WHERE {sql.refused} AND {sql.window}{present}"
                     + ("" if key == "total" else f" GROUP BY {raw_key}"))
        params += [start, end]
    order = "k" if key == "day" else "n DESC, k"
    having = "" if blank is None else (" HAVING k = ''" if blank else " HAVING k <> ''")
    statement = (f"SELECT k, SUM(n) AS n FROM ({' UNION ALL '.join(parts)}) AS t GROUP BY k{having} "
                 f"ORDER BY {order}")
    if limit is not None:
        statement += f" LIMIT {int(limit)}"
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return [(k, int(n)) for k, n in cursor.fetchall()]


def refusal_report(user, *, since: datetime, until: datetime, limit: int = 20) -> RefusalReport:
    """Counts of refused / would-refuse placements in [since, until): whole days the rollup covers come from
    the rollup, the rest from the placements (so the figures are exact whether or not the rollup ran).
    Fleet-wide counts (a decision aid for the whole fleet); teams ``user`` is not in are summed under
    ``OTHER_TEAMS``, never named."""
    window = _split(since, until)
    total = sum(n for _k, n in _counts(window, key="total"))
    outcomes = dict(_counts(window, key="outcome"))
    groves = _counts(window, key="grove_slug", blank=False)
    by_grove = groves[:limit]
    by_team = _by_label(user, _counts(window, key="team"))[:limit]
    counts = {(d if isinstance(d, date) else date.fromisoformat(str(d)[:10])): n
              for d, n in _counts(window, key="day")}
    last_day = (until - timedelta(microseconds=1)).date()  # ``until`` is exclusive
    days = (last_day - since.date()).days + 1
    trend = [(since.date() + timedelta(days=i), counts.get(since.date() + timedelta(days=i), 0))
             for i in range(max(1, days))]
    nodes = list(PipelineNode.objects.filter(status=NodeStatus.FAILED, reason__in=NODE_REFUSAL_REASONS,
                                             finished_at__gte=since, finished_at__lt=until)
                 .values("reason").annotate(n=Count("id")).order_by("-n").values_list("reason", "n"))
    return RefusalReport(since=since, until=until, total=total,
                         by_code=_counts(window, key="code", limit=limit),
                         by_grove=by_grove, by_team=by_team, trend=trend, node_refusals=nodes,
                         refused=outcomes.get("refused", 0), would_refuse=outcomes.get("would_refuse", 0),
                         no_grove=sum(n for _k, n in _counts(window, key="grove_slug", blank=True)),
                         groves=len(groves))


def _by_label(user, counts: list[tuple[str, int]]) -> list[tuple[str, int]]:
    summed: dict[str, int] = defaultdict(int)
    for team, n in counts:
        summed[team_label(user, team or "")] += n
    return sorted(summed.items(), key=lambda item: (-item[1], item[0]))


def refusal_codes(*, since: datetime, until: datetime, limit: int = 50) -> list[tuple[str, int]]:
    """Counts per incompatibility code in [since, until) (the rollup's days and the placements' rest)."""
    return _counts(_split(since, until), key="code", limit=limit)


# --- compute jobs (issue 21) --------------------------------------------------------------------------

@dataclass
class ComputeJobPage:
    job: object  # apps.compute.models.ComputeJob
    steps: list[dict]
    attempts: list[GroveJob]


def compute_job_page(user, *, job_id) -> ComputeJobPage:
    """One compute job as its staff page shows it, for ``user`` (only their teams' jobs unless they act for
    every team): each step with its node, stored placement (and that decision's outcome), current Grove job
    (with its ``unclaimed`` signal and output tail), and every attempt's Grove job. Four queries."""
    from apps.dispatch.selectors import job_signal
    from apps.placement.selectors import placement_outcome

    job = compute_job_detail(user, job_id=job_id)  # 404 compute_job_not_found, 403 team_forbidden
    nodes = list(job.run.nodes.select_related("grove", "current_job", "current_job__grove").order_by("position"))
    placements = {p.subject_id: p for p in ExecutionPlacement.objects.filter(
        subject_type="pipeline_node", subject_id__in=[str(n.pk) for n in nodes]).only(
        "id", "subject_id", "grove_id", "grove_slug", "selected_platform", "would_refuse", "outcome", "code",
        "chooser", "decision")}
    attempts = list(GroveJob.objects.filter(run_id=job.run_id).select_related("grove")
                    .defer("payload", "outputs").order_by("node_id", "attempt"))
    steps = []
    for node in nodes:
        placement = placements.get(str(node.pk))
        current = node.current_job if node.current_job_id else None
        steps.append({"node": node, "placement": placement,
                      "verdict": placement_outcome(placement) if placement else None,
                      "job": current, "signal": job_signal(current),
                      "log_tail": output_tail(current)})
    return ComputeJobPage(job=job, steps=steps, attempts=attempts)


def compute_jobs_by_run(run_ids) -> dict:
    """run id → (compute job id, name) for the compute runs among ``run_ids``: one query."""
    return {run_id: (job_id, name) for job_id, name, run_id in
            ComputeJob.objects.filter(run_id__in=list(run_ids)).values_list("id", "name", "run_id")}
