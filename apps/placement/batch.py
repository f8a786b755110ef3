"""Batched placement: N subjects placed in one transaction, never overcommitting a unit (docs/decisions.md).

``place_batch`` reads the fleet snapshot once and decides every subject in memory: the Grove-independent
part of a decision (eligibility, the verdicts, a refusal or the shadow-mode fallback) is
``services._decide_current``, made once per requirement and shared by every subject that carries it; the
per-subject part walks the shape's precomputed ranking (``fleet.FleetIndex.ranking``: the chooser's order
for work that fits) and takes the first fresh Grove with a unit that still fits the subject's CPU and
memory (and admits its accelerators on that unit). What it places is subtracted from the working facts
at once (kube-scheduler's *assume cache*), so the next subject sees what is left; a subject nothing fits
fails with ``no_capacity`` instead of overcommitting a unit.

The write, in one transaction: lock the unit rows of every Grove the batch touched (the lock accelerator
claims take too), re-read their reported free counts and the assume ledger (``UnitLoad``: what Host has
placed on each unit since the Grove last reported), and re-verify every placement against them. Another
process that placed on those Groves meanwhile makes the verification fail: the transaction rolls back,
those Groves are re-read into the snapshot, and the batch decides again (``DECIDE_ATTEMPTS`` times). Then
the ledger rows, the shared verdicts (``PlacementVerdicts``, once per requirement and facts) and the
placements (``COPY`` on PostgreSQL, an ORM bulk insert elsewhere) are written, and the snapshot takes the
batch's assumed facts.

A subject already placed returns its stored placement (``services._reuse``), as a retry of
``place_execution`` does; one placed concurrently by another call loses the insert and is re-read.
"""
from __future__ import annotations

import hashlib
import json
import logging
from collections import defaultdict
from dataclasses import dataclass, field, replace

from django.db import IntegrityError, OperationalError, connection, transaction
from django.utils import timezone
from psycopg import errors as pg_errors

from apps.accelerators import rules as accelerator_rules
from apps.core.errors import Conflict, ForestError, ValidationFailed
from apps.flags.selectors import is_enabled
from apps.groves.models import Grove, PlacementUnit
from apps.placement import admission, rules, services, snapshot
from apps.placement.choices import COMPATIBILITY_FLAG, PERSISTED_FLAG, Chooser, Outcome
from apps.placement.models import ExecutionPlacement, PlacementVerdicts, UnitLoad
from apps.placement.requirements import ExecutionRequirement
from apps.placement.rules import GroveFacts, frontier
from apps.placement.vocabulary import BATCH_TOP_CANDIDATES, MAX_BATCH_SIZE

log = logging.getLogger(__name__)

# The columns a batch writes, in COPY order (``created_at`` and ``updated_at`` are the batch's one time).
COLUMNS = ("id", "subject_type", "subject_id", "grove_id", "grove_slug", "selected_platform", "requirement",
           "decision", "chooser", "enforced", "would_refuse", "team", "environment", "created_at", "updated_at",
           "history", "verdicts_key", "outcome", "code")


@dataclass(frozen=True)
class BatchItem:
    subject_type: str
    subject_id: str
    requirement: ExecutionRequirement
    target: str | None = None
    team: str | None = None
    environment: str | None = None


@dataclass
class BatchOutcome:
    """One subject's result: placed now, reused (already placed), or an error with a stable code."""

    subject_type: str
    subject_id: str
    placement_id: int | None = None
    grove_id: str | None = None
    grove_slug: str | None = None
    selected_platform: str = ""
    decision: dict | None = None
    would_refuse: bool = False
    reused: bool = False
    error: ForestError | None = None

    @property
    def status(self) -> str:
        return "error" if self.error is not None else "reused" if self.reused else "placed"


@dataclass
class _Shape:
    """One requirement's shared decision within a batch round: decided once, walked by every subject."""

    decision: services.Decision
    ranking: list[str]
    verdicts_key: str
    verdicts_body: dict
    requirement_json: str
    counts: dict[str, int]
    platforms: dict[str, str] = field(default_factory=dict)  # slug -> selected platform (fixed per Grove)


@dataclass
class _Plan:
    index: int
    item: BatchItem
    facts: GroveFacts
    unit_id: str | None
    decision: dict
    shape: _Shape | None
    chooser: str
    enforced: bool
    would_refuse: bool


def _deadlock(error: Exception) -> bool:
    """A deadlock PostgreSQL broke by aborting this transaction (wrapped by Django, or raw from COPY)."""
    return any(isinstance(e, pg_errors.DeadlockDetected) for e in (error, error.__cause__))


class _Conflicted(Exception):
    def __init__(self, grove_ids: set[str]):
        super().__init__(f"{len(grove_ids)} Groves changed under the batch")
        self.grove_ids = grove_ids


def no_capacity(item: BatchItem, summary: str) -> Conflict:
    resources = item.requirement.resources
    gpus = f" and {item.requirement.accelerators.count} accelerator(s)" if item.requirement.accelerators else ""
    return Conflict("no_capacity",
                    f"No eligible fresh Grove has a unit with {resources.cpu_milli}m CPU and "
                    f"{resources.memory_bytes} bytes of memory{gpus} free after the work already placed "
                    f"({summary}); wait for capacity or add Groves.")


class _Working:
    """A Grove as the batch has assumed it so far: each unit's free CPU and memory, and Host's accelerator
    claims plus the batch's own (the assume cache). ``facts`` is how the snapshot had it."""

    __slots__ = ("claimed", "facts", "free")

    def __init__(self, facts: GroveFacts):
        self.facts = facts
        self.free = [[unit_id, cpu, memory] for unit_id, cpu, memory in facts.unit_free]
        self.claimed = dict(facts.claimed)

    def fit(self, requirement: ExecutionRequirement) -> tuple[str | None, object] | None:
        return _fit(requirement, self.facts, self.free, self.claimed)

    def take(self, unit_id: str | None, requirement: ExecutionRequirement,
             admission: accelerator_rules.Admission | None) -> None:
        if unit_id is None:
            return
        for unit in self.free:
            if unit[0] == unit_id:
                unit[1] -= requirement.resources.cpu_milli
                unit[2] -= requirement.resources.memory_bytes
        if admission is not None:
            for inventory_id, count in admission.allocations:
                self.claimed[(unit_id, inventory_id)] = self.claimed.get((unit_id, inventory_id), 0) + count

    def assumed(self) -> GroveFacts:
        """The Grove's facts with the batch's placements subtracted (for the snapshot, after commit)."""
        unit_free = tuple((unit_id, cpu, memory) for unit_id, cpu, memory in self.free)
        return replace(self.facts, unit_free=unit_free, units=frontier((c, m) for _u, c, m in unit_free),
                       claimed=tuple(sorted(self.claimed.items())))


def _fit(requirement: ExecutionRequirement, facts: GroveFacts, free, claimed) -> tuple[str, object] | None:
    """(unit id, accelerator admission) of the unit this Grove would give the work now, or None when none
    fits: the one resource admission (``services.fit_on``), over ``free`` (unit id, free CPU, free memory)
    and ``claimed`` as assumed so far."""
    cpu, memory = requirement.resources.cpu_milli, requirement.resources.memory_bytes
    # Necessary for "now", and cheap: most Groves a long batch walks past are full.
    if not any(free_cpu >= cpu and free_memory >= memory for _unit, free_cpu, free_memory in free):
        return None
    verdict = services.fit_on(admission.Needs.of(requirement), facts, free=free, claimed=claimed)
    return (verdict.unit_id, verdict.admission) if verdict.now else None


def _digest(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _shape(requirement: ExecutionRequirement, enforced: bool, index) -> _Shape:
    decision = services._decide_current(requirement, None, enforced)
    body = {"candidates": decision.candidates, "summary": decision.summary,
            "eligible_total": decision.eligible_total, "ineligible_total": decision.ineligible_total}
    counts: dict[str, int] = defaultdict(int)
    for verdict in decision.candidates:
        for code in {item["code"] for item in verdict["incompatibilities"]}:
            counts[code] += 1
    ranking = index.ranking(requirement) if decision.chooser == Chooser.SELECTION else []
    return _Shape(decision=decision, ranking=ranking, verdicts_key=_digest(body), verdicts_body=body,
                  requirement_json=json.dumps(requirement.to_json()), counts=dict(counts))


class _Round:
    """One attempt's in-memory decisions: the working (assumed) facts and a cursor per shape and size."""

    def __init__(self, index, stale: set[str], cursors: dict):
        self.index, self.stale = index, stale
        self.working: dict[str, _Working] = {}
        self.shapes: dict[tuple, _Shape] = {}
        # (requirement, enforced, ranking) -> position in the ranking before which no Grove fits it any
        # more: capacity only shrinks between the snapshot's reads, so a Grove skipped once is not needed
        # again until then (the snapshot clears them whenever it reads Groves).
        self.cursors = cursors

    def fit(self, facts: GroveFacts, requirement: ExecutionRequirement) -> tuple[str | None, object] | None:
        working = self.working.get(facts.slug)
        if working is not None:
            return working.fit(requirement)
        return _fit(requirement, facts, facts.unit_free, dict(facts.claimed) if requirement.accelerators else {})

    def assumed(self) -> list[GroveFacts]:
        return [working.assumed() for working in self.working.values()]

    def shape(self, requirement: ExecutionRequirement, enforced: bool) -> _Shape:
        key = (requirement, enforced)
        shape = self.shapes.get(key)
        if shape is None:
            shape = self.shapes[key] = _shape(requirement, enforced, self.index)
        return shape

    def decide(self, item: BatchItem, index: int, enforced: bool) -> _Plan:
        requirement = item.requirement
        reference = item.target or (requirement.target.grove_id if requirement.target else None)
        if reference:
            return self._explicit(item, index, reference, enforced)
        shape = self.shape(requirement, enforced)
        decision = shape.decision
        # A shape waiting for capacity was judged on its best-ranked Groves only: the walk below still
        # looks down the whole ranking, and the subject waits only when nothing in it has room.
        if decision.refusal is not None and not (decision.outcome == Outcome.WAITING and shape.ranking):
            raise decision.refusal
        if decision.chooser == Chooser.FALLBACK:  # shadow mode: the one closest Grove, if it has room
            facts = self.index.records.get(decision.grove.slug, decision.grove)
            return self._assume(item, index, facts, shape, rank=1, enforced=enforced, top=[])
        ranking = shape.ranking
        key = (requirement, enforced)
        held = self.cursors.get(key)
        position = held[1] if held is not None and held[0] is ranking else 0
        chosen, top = None, []
        while position < len(ranking):
            slug = ranking[position]
            if slug in self.stale or slug not in self.index.records:
                position += 1
                continue
            facts = self.index.records[slug]
            fit = self.fit(facts, requirement)
            if fit is None:
                position += 1
                continue
            chosen = (facts, fit)
            break
        self.cursors[key] = (ranking, position)
        if chosen is None:
            # Not ``waiting_for_capacity``: a batch item joins no queue (its caller, e.g. a node's own
            # dispatch, waits); ``no_capacity`` says it fits later and nothing is free now.
            raise no_capacity(item, decision.summary)
        # The next few that fit, for the subject's own explanation (not advanced past: they still fit).
        for slug in ranking[position + 1:]:
            if len(top) >= BATCH_TOP_CANDIDATES - 1:
                break
            if slug in self.stale or slug not in self.index.records:
                continue
            other = self.index.records[slug]
            if self.fit(other, requirement) is not None:
                top.append(other)
        return self._assume(item, index, chosen[0], shape, rank=1, enforced=enforced, top=top, fit=chosen[1])

    def _platform(self, shape: _Shape, requirement: ExecutionRequirement, facts: GroveFacts) -> str:
        platform = shape.platforms.get(facts.slug)
        if platform is None:
            platform = shape.platforms[facts.slug] = rules.selected_platform(requirement, facts)
        return platform

    def _assume(self, item: BatchItem, index: int, facts: GroveFacts, shape: _Shape, *, rank: int, enforced: bool,
                top: list[GroveFacts], fit=None) -> _Plan:
        requirement = item.requirement
        fit = fit if fit is not None else self.fit(facts, requirement)
        if fit is None:
            raise no_capacity(item, shape.decision.summary)
        unit_id, admission = fit
        decision = shape.decision
        platform = self._platform(shape, requirement, facts)
        entries = [_top_entry(facts, rank, platform, unit_id, admission)]
        entries += [_top_entry(other, rank + 1 + n, self._platform(shape, requirement, other), None, None)
                    for n, other in enumerate(top)]
        body = {
            "grove_id": facts.id, "grove_slug": facts.slug, "selected_platform": platform,
            "chooser": decision.chooser, "enforced": enforced, "would_refuse": decision.would_refuse,
            "incompatibilities": decision.incompatibilities, "summary": decision.summary,
            "eligible_total": decision.eligible_total, "ineligible_total": decision.ineligible_total,
            "unit": unit_id, "top": entries, "counts": shape.counts, "verdicts": shape.verdicts_key,
        }
        working = self.working.get(facts.slug)
        if working is None or working.facts.id != facts.id:
            working = self.working[facts.slug] = _Working(facts)
        working.take(unit_id, requirement, admission)
        return _Plan(index=index, item=item, facts=facts, unit_id=unit_id, decision=body, shape=shape,
                     chooser=decision.chooser, enforced=enforced, would_refuse=decision.would_refuse)

    def _explicit(self, item: BatchItem, index: int, reference: str, enforced: bool) -> _Plan:
        decision = services._explicit(item.requirement, reference, enforced)
        if decision.refusal is not None:
            raise decision.refusal
        shape = _Shape(decision=decision, ranking=[], verdicts_key="", verdicts_body={},
                       requirement_json=json.dumps(item.requirement.to_json()), counts={})
        facts = self.index.records.get(decision.grove.slug, decision.grove)
        plan = self._assume(item, index, facts, shape, rank=1, enforced=enforced, top=[])
        # An explicit target's decision is one verdict: stored whole, as a single placement stores it.
        plan.decision = {**decision.to_json(), "unit": plan.unit_id}
        return plan


def _top_entry(facts: GroveFacts, rank: int, platform: str, unit_id: str | None,
               admission: accelerator_rules.Admission | None) -> dict:
    entry = {"grove_id": facts.id, "grove_slug": facts.slug, "substrate": facts.substrate, "rank": rank,
             "platform": platform, "fits_cpu_memory": True}
    if unit_id is not None:
        entry["unit"] = unit_id
    if admission is not None:
        entry["fits_accelerators"], entry["accelerator_mode"] = True, admission.label
    return entry


def _validate(items: list[BatchItem], outcomes: list[BatchOutcome]) -> list[int]:
    """Indexes of the items to place: valid subjects, each once (a repeat in one batch is an error)."""
    if len(items) > MAX_BATCH_SIZE:
        raise ValidationFailed("batch_too_large", f"A batch places at most {MAX_BATCH_SIZE} subjects; this one "
                               f"has {len(items)}.", field="items")
    seen: set[tuple[str, str]] = set()
    pending = []
    for index, item in enumerate(items):
        try:
            subject = services._subject(item.subject_type, item.subject_id)
        except ForestError as error:
            outcomes[index].error = error
            continue
        if subject in seen:
            outcomes[index].error = ValidationFailed("duplicate_subject", f"{subject[0]} {subject[1]} appears more "
                                                     "than once in this batch.", field=f"items[{index}]")
            continue
        seen.add(subject)
        outcomes[index].subject_type, outcomes[index].subject_id = subject
        pending.append(index)
    return pending


def _reused(outcome: BatchOutcome, placement: ExecutionPlacement, enforced: bool) -> None:
    try:
        result = services._reuse(placement, enforced=enforced)
    except ForestError as error:
        outcome.error = error
        return
    outcome.placement_id, outcome.reused = placement.pk, True
    outcome.grove_id, outcome.grove_slug = str(placement.grove_id), placement.grove_slug
    outcome.selected_platform, outcome.decision = result.selected_platform, result.decision
    outcome.would_refuse = result.would_refuse


def _existing(keys: list[tuple[str, str]]) -> dict[tuple[str, str], ExecutionPlacement]:
    by_type: dict[str, list[str]] = defaultdict(list)
    for subject_type, subject_id in keys:
        by_type[subject_type].append(subject_id)
    found = {}
    for subject_type, ids in by_type.items():
        if connection.vendor == "postgresql":
            # Which exist, in one array parameter (the ORM's IN of thousands of placeholders costs more
            # than the query); only those rows are then read whole.
            with connection.cursor() as cursor:
                cursor.execute(f"SELECT subject_id FROM {ExecutionPlacement._meta.db_table} WHERE subject_type = %s "
                               "AND subject_id = ANY(%s)", [subject_type, ids])
                ids = [row[0] for row in cursor.fetchall()]
            if not ids:
                continue
        for row in ExecutionPlacement.objects.select_related("grove").filter(subject_type=subject_type,
                                                                             subject_id__in=ids):
            found[(row.subject_type, row.subject_id)] = row
    return found


def place_batch(items: list[BatchItem]) -> list[BatchOutcome]:
    """Place every item in one transaction; one outcome per item, in order (see the module docstring)."""
    outcomes = [BatchOutcome(subject_type=str(item.subject_type), subject_id=str(item.subject_id)) for item in items]
    pending = _validate(items, outcomes)
    flags: dict[tuple, tuple[bool, bool]] = {}
    for index in pending:
        scope = (items[index].environment, items[index].team)
        if scope not in flags:
            flags[scope] = (is_enabled(COMPATIBILITY_FLAG, environment=scope[0], team=scope[1]),
                            is_enabled(PERSISTED_FLAG, environment=scope[0], team=scope[1]))
    stored = _existing([(outcomes[i].subject_type, outcomes[i].subject_id) for i in pending
                        if flags[(items[i].environment, items[i].team)][1]])
    # A stored refusal or wait is superseded by the placement (as ``place_execution`` does), never reused.
    unplaced = {key: row for key, row in stored.items() if row.outcome != Outcome.PLACED}
    todo = []
    for index in pending:
        outcome = outcomes[index]
        placement = stored.get((outcome.subject_type, outcome.subject_id))
        if placement is not None and placement.outcome == Outcome.PLACED:
            _reused(outcome, placement, flags[(items[index].environment, items[index].team)][0])
        else:
            todo.append(index)

    def write(plans: list[_Plan], outcomes: list[BatchOutcome]) -> set[int]:
        return _write(plans, outcomes, unplaced=unplaced)

    return _rounds(items, todo, outcomes, flags, write)


def _rounds(items: list[BatchItem], todo: list[int], outcomes: list[BatchOutcome], flags: dict, write) -> list[
        BatchOutcome]:
    """Decide ``todo`` in memory and ``write`` them in one transaction, again after a conflict (up to
    ``DECIDE_ATTEMPTS``); ``write(plans, outcomes)`` returns the plan indexes that lost their subject."""
    plans: list[_Plan] = []
    for _attempt in range(services.DECIDE_ATTEMPTS):
        if not todo:
            return outcomes
        for position in todo:
            outcomes[position].error = None
        plans = []
        with snapshot.held() as (index, stale, cursors):
            round_ = _Round(index, stale, cursors)
            for position in todo:
                item = items[position]
                enforced = flags[(item.environment, item.team)][0]
                try:
                    plans.append(round_.decide(item, position, enforced))
                except ForestError as error:
                    outcomes[position].error = error
        for plan in plans:
            services._log_decision(f"{plan.item.subject_type}:{plan.item.subject_id}", _LogView(plan))
        stored_plans = [p for p in plans if flags[(p.item.environment, p.item.team)][1]]
        try:
            with transaction.atomic():
                lost = write(stored_plans, outcomes)
        except _Conflicted as conflict:
            snapshot.fleet_reload(conflict.grove_ids)
            continue
        except (OperationalError, pg_errors.DeadlockDetected) as error:
            if not _deadlock(error):
                snapshot.forget_cursors()
                raise
            # Another batch held what this one wanted, in the other order: decide again from the database.
            snapshot.fleet_reload({plan.facts.id for plan in plans})
            continue
        except BaseException:
            snapshot.forget_cursors()
            raise
        if stored_plans:
            snapshot.assume(round_.assumed())
        else:  # nothing was stored: nothing is assumed
            snapshot.forget_cursors()
        for plan in plans:
            outcome = outcomes[plan.index]
            if plan.index in lost:
                continue
            outcome.grove_id, outcome.grove_slug = plan.facts.id, plan.facts.slug
            outcome.selected_platform, outcome.decision = plan.decision["selected_platform"], plan.decision
            outcome.would_refuse = plan.would_refuse
        _reread_lost(lost, outcomes, items, flags)
        return outcomes
    for plan in plans:
        outcomes[plan.index].error = services._fleet_changed()
    return outcomes


@dataclass
class _LogView:
    """What ``services._log_decision`` reads of a decision, for a planned subject."""

    plan: _Plan
    refusal: None = None

    @property
    def would_refuse(self) -> bool:
        return self.plan.would_refuse

    @property
    def summary(self) -> str:
        return self.plan.decision["summary"]

    @property
    def grove(self) -> GroveFacts:
        return self.plan.facts

    @property
    def incompatibilities(self) -> list[dict]:
        return self.plan.decision["incompatibilities"]


def _reread_lost(lost: set[int], outcomes: list[BatchOutcome], items: list[BatchItem], flags: dict) -> None:
    """Subjects another call placed between the batch's read and its insert: theirs is the placement."""
    if not lost:
        return
    found = _existing([(outcomes[i].subject_type, outcomes[i].subject_id) for i in lost])
    for index in lost:
        placement = found.get((outcomes[index].subject_type, outcomes[index].subject_id))
        if placement is None or placement.outcome != Outcome.PLACED:
            outcomes[index].error = services._fleet_changed()
        else:
            _reused(outcomes[index], placement, flags[(items[index].environment, items[index].team)][0])


def _verify(plans: list[_Plan]) -> dict[tuple[str, str], tuple]:
    """Under the unit rows' lock: every planned placement still fits its unit by the database's own counts
    (reported free less the ledger), and its Grove is still enabled, fresh and as the decision saw it.
    Returns the ledger rows to write; raises ``_Conflicted`` with the Groves that no longer hold."""
    grove_ids = sorted({plan.facts.id for plan in plans})
    units = list(PlacementUnit.objects.select_for_update().filter(grove_id__in=grove_ids)
                 .order_by("grove_id", "unit_id").values_list("grove_id", "unit_id", "cpu_milli_free",
                                                              "memory_bytes_free"))
    groves = {str(row[0]): row for row in Grove.objects.filter(id__in=grove_ids).values_list(
        "id", "enabled", "last_heartbeat_at", "capacity_reported_at", "substrate", "roles", "platforms",
        "isolation_modes", "change_kinds")}
    loads = {(str(g), u): (at, cpu, memory) for g, u, at, cpu, memory in UnitLoad.objects.filter(
        grove_id__in=grove_ids).values_list("grove_id", "unit_id", "reported_at", "cpu_milli", "memory_bytes")}
    cutoff = snapshot.stale_cutoff()
    free, ledger = {}, {}
    for grove_id, unit_id, cpu, memory in units:
        grove_id = str(grove_id)
        reported_at = groves[grove_id][3]
        at, load_cpu, load_memory = loads.get((grove_id, unit_id), (None, 0, 0))
        if at != reported_at:
            load_cpu, load_memory = 0, 0
        free[(grove_id, unit_id)] = [cpu - load_cpu, memory - load_memory]
        ledger[(grove_id, unit_id)] = [reported_at, load_cpu, load_memory, False]
    conflicted = set()
    for plan in plans:
        row = groves.get(plan.facts.id)
        facts = plan.facts
        if row is None or (plan.chooser != Chooser.EXPLICIT and (
                not row[1] or row[2] is None or row[2].timestamp() < cutoff
                or (row[4], tuple(row[5]), tuple(row[6]), tuple(row[7]), tuple(row[8]))
                != (facts.substrate, facts.roles, facts.platforms, facts.isolation_modes, facts.change_kinds))):
            conflicted.add(facts.id)
            continue
        if plan.unit_id is None:
            continue
        room = free.get((facts.id, plan.unit_id))
        resources = plan.item.requirement.resources
        if room is None or room[0] < resources.cpu_milli or room[1] < resources.memory_bytes:
            conflicted.add(facts.id)
            continue
        room[0] -= resources.cpu_milli
        room[1] -= resources.memory_bytes
    if conflicted:
        raise _Conflicted(conflicted)
    return ledger


def _write(plans: list[_Plan], outcomes: list[BatchOutcome], *,
           unplaced: dict[tuple[str, str], ExecutionPlacement] | None = None) -> set[int]:
    """Inside the batch's transaction: verify, then write placements, shared verdicts and the ledger.
    Returns the plan indexes whose subject another call placed first (nothing written for them).
    ``unplaced``: the subjects' stored refusals and waits, removed here and kept in the new decision."""
    if not plans:
        return set()
    ledger = _verify(plans)
    if unplaced:
        superseded = []
        for plan in plans:
            row = unplaced.get((str(plan.item.subject_type), str(plan.item.subject_id).strip()))
            if row is not None:
                plan.decision["earlier"] = services.unplaced_summary(row)
                superseded.append(row.pk)
        ExecutionPlacement.objects.filter(pk__in=superseded).exclude(outcome=Outcome.PLACED).delete()
    now = _verdicts_write(plans)
    lost, ids = _insert(plans, now)
    _ledger_write(plans, ledger, lost)
    for plan in plans:
        if plan.index not in lost:
            outcomes[plan.index].placement_id = ids.get(plan.index)
    return lost


def _verdicts_write(plans: list[_Plan]):
    now = timezone.now()
    shapes = {plan.shape.verdicts_key: plan.shape for plan in plans if plan.shape and plan.shape.verdicts_key}
    # In key order, as the placements are in subject order: two batches wait on each other's rows in one
    # order, never in a cycle.
    PlacementVerdicts.objects.bulk_create([PlacementVerdicts(key=key, body=shapes[key].verdicts_body, created_at=now)
                                           for key in sorted(shapes)], ignore_conflicts=True)
    return now


def _ledger_write(plans: list[_Plan], ledger: dict, lost: set[int]) -> None:
    """The ledger rows of the units these placements took, in one upsert (values computed under the lock)."""
    for plan in plans:
        if plan.index in lost or plan.unit_id is None:
            continue
        entry = ledger[(plan.facts.id, plan.unit_id)]
        entry[1] += plan.item.requirement.resources.cpu_milli
        entry[2] += plan.item.requirement.resources.memory_bytes
        entry[3] = True
    UnitLoad.objects.bulk_create(
        [UnitLoad(grove_id=grove_id, unit_id=unit_id, reported_at=at, cpu_milli=cpu, memory_bytes=memory)
         for (grove_id, unit_id), (at, cpu, memory, touched) in ledger.items() if touched],
        update_conflicts=True, unique_fields=["grove", "unit_id"],
        update_fields=["reported_at", "cpu_milli", "memory_bytes"])


def replace_batch(*, placements: list[ExecutionPlacement], actor, reason: str,
                  target: str | None = None) -> list[BatchOutcome]:
    """Staff only: choose afresh for many stored placements at once (``services.placement_replace`` for
    each, decided and written as one batch): each row keeps its earlier decision in ``history``."""
    reason = services.replace_reason(actor, reason)
    if len(placements) > MAX_BATCH_SIZE:
        raise ValidationFailed("batch_too_large", f"A batch re-places at most {MAX_BATCH_SIZE} placements.",
                               field="placements")
    items = [BatchItem(subject_type=p.subject_type, subject_id=p.subject_id,
                       requirement=ExecutionRequirement.from_json(p.requirement), target=target,
                       team=p.team or None, environment=p.environment or None) for p in placements]
    outcomes = [BatchOutcome(subject_type=p.subject_type, subject_id=p.subject_id, placement_id=p.pk)
                for p in placements]
    flags = {}
    for item in items:
        scope = (item.environment, item.team)
        if scope not in flags:
            flags[scope] = (is_enabled(COMPATIBILITY_FLAG, environment=scope[0], team=scope[1]), True)

    def write(plans: list[_Plan], outcomes: list[BatchOutcome]) -> set[int]:
        ledger = _verify(plans)
        now = _verdicts_write(plans)
        rows = {row.pk: row for row in ExecutionPlacement.objects.select_for_update().filter(
            pk__in=[placements[plan.index].pk for plan in plans])}
        changed = []
        for plan in plans:
            row = rows[placements[plan.index].pk]
            row.history = [*row.history, {
                "grove_id": str(row.grove_id) if row.grove_id else None, "grove_slug": row.grove_slug,
                "selected_platform": row.selected_platform, "decision": row.decision,
                "verdicts_key": row.verdicts_key, "replaced_at": now.isoformat(),
                "replaced_by": actor.get_username(), "reason": reason}]
            row.grove_id, row.grove_slug = plan.facts.id, plan.facts.slug
            row.selected_platform, row.decision = plan.decision["selected_platform"], plan.decision
            row.requirement = json.loads(plan.shape.requirement_json)
            row.chooser, row.enforced, row.would_refuse = plan.chooser, plan.enforced, plan.would_refuse
            row.verdicts_key, row.updated_at = plan.shape.verdicts_key, now
            row.outcome, row.code = Outcome.PLACED, ""
            changed.append(row)
        ExecutionPlacement.objects.bulk_update(changed, ["history", "grove_id", "grove_slug", "selected_platform",
                                                         "decision", "requirement", "chooser", "enforced",
                                                         "would_refuse", "verdicts_key", "updated_at", "outcome",
                                                         "code"])
        _ledger_write(plans, ledger, set())
        return set()

    outcomes = _rounds(items, list(range(len(items))), outcomes, flags, write)
    log.info("placements replaced", extra={"count": sum(o.error is None for o in outcomes), "actor": str(actor)})
    return outcomes


def _rows(plans: list[_Plan], ids: list[int | None], now) -> list[tuple]:
    rows = []
    for plan, placement_id in zip(plans, ids, strict=True):
        item, decision = plan.item, plan.decision
        rows.append((placement_id, item.subject_type, str(item.subject_id).strip(), plan.facts.id, plan.facts.slug,
                     decision["selected_platform"], plan.shape.requirement_json, json.dumps(decision),
                     plan.chooser, plan.enforced, plan.would_refuse, item.team or "", item.environment or "",
                     now, now, "[]", plan.shape.verdicts_key, Outcome.PLACED, ""))
    return rows


def _insert(plans: list[_Plan], now) -> tuple[set[int], dict[int, int]]:
    """The placements in one statement: ``COPY`` on PostgreSQL (ids drawn from the sequence first, so
    nothing needs reading back), an ORM bulk insert elsewhere. A subject placed meanwhile by another call
    makes COPY fail: then one multi-row ``INSERT … ON CONFLICT DO NOTHING`` writes the rest. Returns the
    plan indexes that lost their subject to another call, and the placement id of each other plan."""
    table = ExecutionPlacement._meta.db_table
    plans = sorted(plans, key=lambda plan: (plan.item.subject_type, str(plan.item.subject_id).strip()))
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT nextval(pg_get_serial_sequence('{table}', 'id')) FROM generate_series(1, %s::int)",
                           [len(plans)])
            ids = [row[0] for row in cursor.fetchall()]
        rows = _rows(plans, ids, now)
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                raw = cursor.cursor
                with raw.copy(f"COPY {table} ({', '.join(COLUMNS)}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
            return set(), {plan.index: placement_id for plan, placement_id in zip(plans, ids, strict=True)}
        except (IntegrityError, pg_errors.UniqueViolation):  # COPY runs on the raw cursor: the driver's own
            pass
        with connection.cursor() as cursor:
            values = ", ".join(["(" + ", ".join(["%s"] * len(COLUMNS)) + ")"] * len(rows))
            cursor.execute(f"INSERT INTO {table} ({', '.join(COLUMNS)}) VALUES {values} "
                           "ON CONFLICT (subject_type, subject_id) DO NOTHING RETURNING id",
                           [value for row in rows for value in row])
            written = {row[0] for row in cursor.fetchall()}
        pairs = list(zip(plans, ids, strict=True))
        return ({plan.index for plan, placement_id in pairs if placement_id not in written},
                {plan.index: placement_id for plan, placement_id in pairs if placement_id in written})
    # SQLite (``make run``): the ORM's multi-row INSERT OR IGNORE, then the new rows read back by subject
    # (``created_at`` is stamped on insert, never before ``now``).
    objects = []
    for row in _rows(plans, [None] * len(plans), now):
        values = dict(zip(COLUMNS[1:], row[1:], strict=True))
        values.update(requirement=json.loads(values["requirement"]), decision=json.loads(values["decision"]),
                      history=[])
        objects.append(ExecutionPlacement(**values))
    ExecutionPlacement.objects.bulk_create(objects, ignore_conflicts=True)
    keys = [(plan.item.subject_type, str(plan.item.subject_id).strip()) for plan in plans]
    found = {(row[1], row[2]): row[0] for row in ExecutionPlacement.objects.filter(
        subject_id__in=[key[1] for key in keys], created_at__gte=now).values_list("id", "subject_type", "subject_id")}
    lost, ids = set(), {}
    for plan, key in zip(plans, keys, strict=True):
        if key in found:
            ids[plan.index] = found[key]
        else:
            lost.add(plan.index)
    return lost, ids
