"""Batched placement: N subjects placed in one transaction, never overcommitting a unit (docs/decisions.md).

``place_batch`` reads the fleet snapshot once and decides every subject in memory with the one decision
core, ``decide.decide``: once per requirement with every verdict (eligibility, the verdicts stored once and
shared, a refusal), then once per subject over the batch's own loads (``decide.Loads``: each touched
Grove's unit free counts and accelerator claims after what the batch already placed — kube-scheduler's
*assume cache* — and the subject's spread-group counts), which samples, scores and chooses exactly as a
single placement does. A subject nothing has room for fails with ``no_capacity`` instead of overcommitting.

The writes (``writes.placements_write``), in one transaction: lock the unit rows the batch places on,
re-read their reported free counts and the ledger (``UnitLoad``), re-verify every placement; another
process that placed on those units meanwhile so that they no longer hold makes it fail: the transaction
rolls back, those Groves are re-read into the snapshot and the batch decides again (``DECIDE_ATTEMPTS``
times). Then the ledger rows, the shared verdicts and the placements (``COPY`` on PostgreSQL) are
written, and the snapshot takes the batch's assumed facts. A subject already placed returns its stored placement
(``services.placement_reuse``), as a retry of ``place_execution`` does.
"""
from __future__ import annotations

import hashlib
import json
import logging
from collections import defaultdict
from dataclasses import dataclass, replace

import orjson
from django.db import OperationalError, transaction
from psycopg import errors as pg_errors

from apps.core.errors import Conflict, ForestError, ValidationFailed
from apps.core.gcpause import collection_paused
from apps.flags.selectors import is_enabled
from apps.placement import ledger, selectors, services, snapshot, writes
from apps.placement.choices import COMPATIBILITY_FLAG, PERSISTED_FLAG, Outcome
from apps.placement.decide import Decision, Loads, decide
from apps.placement.fleet import CandidateSet
from apps.placement.models import ExecutionPlacement
from apps.placement.plan import Plan
from apps.placement.requirements import ExecutionRequirement
from apps.placement.rules import GroveFacts, frontier, platform_at
from apps.placement.vocabulary import BATCH_TOP_CANDIDATES, MAX_BATCH_SIZE

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchItem:
    subject_type: str
    subject_id: str
    requirement: ExecutionRequirement
    target: str | None = None
    team: str | None = None
    environment: str | None = None
    group: str | None = None  # the spread group (e.g. ``run:<id>``): the run-spread plugin keeps it apart


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
    """One requirement's shared decision within a batch round: its verdicts, stored once for every subject."""

    requirement: ExecutionRequirement
    decision: Decision
    verdicts_key: str
    verdicts_json: str  # the verdicts as stored, keys sorted: what ``verdicts_key`` hashes
    requirement_json: str
    counts: dict[str, int]
    shared: dict  # the stored decision's keys every subject of the shape has alike
    shared_json: str  # ``shared`` encoded, without its braces


def _deadlock(error: Exception) -> bool:
    """A deadlock PostgreSQL broke by aborting this transaction (wrapped by Django, or raw from COPY)."""
    return any(isinstance(e, pg_errors.DeadlockDetected) for e in (error, error.__cause__))


def no_capacity(item: BatchItem, summary: str) -> Conflict:
    resources = item.requirement.resources
    gpus = f" and {item.requirement.accelerators.count} accelerator(s)" if item.requirement.accelerators else ""
    return Conflict("no_capacity",
                    f"No eligible fresh Grove has a unit with {resources.cpu_milli}m CPU and "
                    f"{resources.memory_bytes} bytes of memory{gpus} free after the work already placed "
                    f"({summary}); wait for capacity or add Groves.")


def _canonical(body: dict) -> bytes:
    """``body`` as JSON with its keys sorted: the same content, the same bytes (what the verdicts key hashes)."""
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


def _top_entry(row, rank: int, platform: str) -> dict:
    entry = {"grove_id": row.facts.id, "grove_slug": row.facts.slug, "substrate": row.facts.substrate, "rank": rank,
             "platform": platform, "fits_cpu_memory": True, "fit": row.fit.to_json(),
             "score": row.score_json()}
    if row.fit.unit_id:
        entry["unit"] = row.fit.unit_id
    if row.fit.admission is not None:
        entry["fits_accelerators"], entry["accelerator_mode"] = True, row.fit.admission.label
    return entry


def _compact_scores(scores: dict | None, top: list) -> dict | None:
    """The stored "why here" without the chosen Grove's and the runner-up's columns when they are the first
    two of ``top`` (as in every batch decision): ``selectors.placement_decision`` puts them back from there.
    Each is ~190 bytes of a ~2 KB row."""
    if not scores or len(top) < 1:
        return scores
    chosen, runner = scores.get("chosen"), scores.get("runner_up")
    if chosen is None or chosen["grove_id"] != top[0].facts.id:
        return scores
    if runner is not None and (len(top) < 2 or runner["grove_id"] != top[1].facts.id):
        return scores
    if runner is None and len(top) > 1:
        return scores
    compact = dict(scores)
    compact.pop("chosen")
    compact.pop("runner_up", None)
    return compact


class _Round:
    """One attempt's in-memory decisions: the snapshot as held, and the loads the batch has assumed so far
    (free rows and claims per touched Grove, placements per spread group and Grove)."""

    def __init__(self, index, cutoff: float, groups: dict[str, dict[str, int]]):
        self.index, self.cutoff = index, cutoff
        self.free: dict[str, list[list]] = {}
        self.claimed: dict[str, dict] = {}
        self.touched: dict[str, GroveFacts] = {}
        self.groups = groups
        self.shapes: dict[tuple, _Shape] = {}
        # What ``decide.rank`` judged per Grove, kept while the Grove's load version stands (``_take``
        # moves it): each placement makes one Grove be judged again, the rest are read back.
        self.memo: dict = {}
        self.versions: dict[str, int] = {}
        self._loads: dict[str | None, Loads] = {}

    def view(self, requirement: ExecutionRequirement, *, limit: int, role_only: bool = False,
             start: int = 0, with_others: bool = True) -> CandidateSet:
        """The snapshot's sample, with room judged on the batch's assumed free counts."""
        return self.index.select(requirement, limit=limit, cap=snapshot.COUNT_CAP, cutoff=self.cutoff,
                                 role_only=role_only, start=start, free=self.free, with_others=with_others)

    def shape(self, requirement: ExecutionRequirement, enforced: bool) -> _Shape:
        # By the object's identity (the batch's items share a few parsed requirements; hashing a nested
        # requirement per subject cost more than the lookup), the object kept in the shape.
        key = (id(requirement), enforced)
        shape = self.shapes.get(key)
        if shape is None or shape.requirement is not requirement:
            decision = decide(requirement, fleet_view=self.view, loads=self.loads(None), enforced=enforced)
            body = {"candidates": decision.candidates, "summary": decision.summary,
                    "eligible_total": decision.eligible_total, "ineligible_total": decision.ineligible_total}
            counts: dict[str, int] = defaultdict(int)
            for verdict in decision.candidates:
                for code in {item["code"] for item in verdict["incompatibilities"]}:
                    counts[code] += 1
            canonical = _canonical(body)
            verdicts_key = hashlib.sha256(canonical).hexdigest()
            # What every subject of this shape stores alike, encoded once (``Plan.shared_json``).
            shared = {"enforced": enforced, "summary": decision.summary, "eligible_total": decision.eligible_total,
                      "ineligible_total": decision.ineligible_total, "counts": dict(counts),
                      "verdicts": verdicts_key}
            shape = self.shapes[key] = _Shape(requirement=requirement, decision=decision, verdicts_key=verdicts_key,
                                              verdicts_json=canonical.decode(),
                                              requirement_json=json.dumps(requirement.to_json()),
                                              counts=dict(counts), shared=shared,
                                              shared_json=orjson.dumps(shared)[1:-1].decode())
        return shape

    def loads(self, group: str | None) -> Loads:
        """The loads a decision reads: one object per spread group, over the round's own dicts (``_take``
        changes them in place), so a subject's call builds none."""
        loads = self._loads.get(group)
        if loads is None:
            loads = self._loads[group] = Loads(free=self.free, claimed=self.claimed,
                                               group=self.groups.setdefault(group, {}) if group else {},
                                               memo=self.memo, versions=self.versions)
        return loads

    def decide(self, item: BatchItem, index: int, enforced: bool) -> Plan:
        requirement = item.requirement
        reference = item.target or (requirement.target.grove_id if requirement.target else None)
        subject = services.subject_label(item.subject_type, item.subject_id)
        shape = None
        if not reference:
            shape = self.shape(requirement, enforced)
            refusal = shape.decision.refusal
            # Capacity only shrinks within a batch: what the requirement could never fit stays so, and what
            # had no room before this batch placed anything has none now.
            if refusal is not None:
                if shape.decision.outcome == Outcome.WAITING:
                    raise no_capacity(item, shape.decision.summary)
                raise refusal
        decision = decide(requirement, fleet_view=self.view, loads=self.loads(item.group), subject=subject,
                          target=reference, enforced=enforced, explain=reference is not None,
                          policy=shape.decision.policy if shape is not None else None)
        if decision.refusal is not None:
            if decision.outcome == Outcome.WAITING:
                raise no_capacity(item, decision.summary or (shape.decision.summary if shape else ""))
            raise decision.refusal
        services.log_decision(subject, decision)
        facts = self.index.records.get(decision.grove.slug, decision.grove)
        if facts.id != decision.grove.id:
            facts = decision.grove
        unit_id = decision.fit.unit_id or None if decision.fit is not None else None
        own = None
        if shape is None:  # an explicit target's decision is one verdict: stored whole, as a single one is
            body = {**decision.to_json(), "unit": unit_id}
            key, verdicts, requirement_json = "", "", json.dumps(requirement.to_json())
        else:
            top = [row for row in decision.ranked if row.score is not None][:BATCH_TOP_CANDIDATES]
            own = {
                "grove_id": facts.id, "grove_slug": facts.slug, "selected_platform": decision.selected_platform,
                "chooser": decision.chooser, "would_refuse": decision.would_refuse,
                "incompatibilities": decision.incompatibilities, "unit": unit_id,
                "top": [_top_entry(row, rank, platform_at(row.facts.platforms, row.platform_rank))
                        for rank, row in enumerate(top, start=1)],
                "scores": _compact_scores(decision.scores, top),
            }
            body = {**own, **shape.shared}
            key, verdicts, requirement_json = shape.verdicts_key, shape.verdicts_json, shape.requirement_json
        self._take(facts, unit_id, requirement, decision, item.group)
        return Plan(
            index=index, subject_type=item.subject_type, subject_id=str(item.subject_id).strip(),
            requirement=requirement, requirement_json=requirement_json, facts=facts, unit_id=unit_id, decision=body,
            chooser=decision.chooser, enforced=enforced, would_refuse=decision.would_refuse, team=item.team or "",
            environment=item.environment or "", group=item.group or "", verdicts_key=key, verdicts_json=verdicts,
            own=own if shape is not None else None, shared_json=shape.shared_json if shape is not None else "")

    def _take(self, facts: GroveFacts, unit_id: str | None, requirement: ExecutionRequirement, decision: Decision,
              group: str | None) -> None:
        """Assume the placement: the unit's free counts and claims less what it takes, the group's count + 1,
        and the Grove's load version moved (what ``rank`` kept for it is judged again)."""
        self.versions[facts.id] = self.versions.get(facts.id, 0) + 1
        if group:
            counts = self.groups.setdefault(group, {})
            counts[facts.id] = counts.get(facts.id, 0) + 1
        if unit_id is None:
            return
        self.touched[facts.id] = facts
        rows = self.free.get(facts.id)
        if rows is None:
            rows = self.free[facts.id] = [[u, cpu, memory] for u, cpu, memory in facts.unit_free]
        for row in rows:
            if row[0] == unit_id:
                row[1] -= requirement.resources.cpu_milli
                row[2] -= requirement.resources.memory_bytes
        admission = decision.fit.admission if decision.fit is not None else None
        if admission is not None:
            claimed = self.claimed.setdefault(facts.id, dict(facts.claimed))
            for inventory_id, count in admission.allocations:
                claimed[(unit_id, inventory_id)] = claimed.get((unit_id, inventory_id), 0) + count

    def assumed(self) -> list[tuple[GroveFacts, GroveFacts]]:
        """The touched Groves' facts as decided from, and with the batch's placements subtracted (for the
        snapshot, after commit)."""
        out = []
        for grove_id, facts in self.touched.items():
            unit_free = tuple([(u, cpu, memory) for u, cpu, memory in self.free[grove_id]])
            claimed = self.claimed.get(grove_id)
            out.append((facts, replace(facts, unit_free=unit_free, units=frontier([(c, m) for _u, c, m in unit_free]),
                                       claimed=tuple(sorted(claimed.items())) if claimed is not None
                                       else facts.claimed)))
        return out


def _validate(items: list[BatchItem], outcomes: list[BatchOutcome]) -> list[int]:
    """Indexes of the items to place: valid subjects, each once (a repeat in one batch is an error)."""
    if len(items) > MAX_BATCH_SIZE:
        raise ValidationFailed("batch_too_large", f"A batch places at most {MAX_BATCH_SIZE} subjects; this one "
                               f"has {len(items)}.", field="items")
    seen: set[tuple[str, str]] = set()
    pending = []
    for index, item in enumerate(items):
        try:
            subject = services.subject_key(item.subject_type, item.subject_id)
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
        result = services.placement_reuse(placement, enforced=enforced)
    except ForestError as error:
        outcome.error = error
        return
    outcome.placement_id, outcome.reused = placement.pk, True
    outcome.grove_id, outcome.grove_slug = str(placement.grove_id), placement.grove_slug
    outcome.selected_platform, outcome.decision = result.selected_platform, result.decision
    outcome.would_refuse = result.would_refuse


def _flags(items: list[BatchItem], indexes, *, persisted: bool | None = None) -> dict[tuple, tuple[bool, bool]]:
    flags: dict[tuple, tuple[bool, bool]] = {}
    for index in indexes:
        scope = (items[index].environment, items[index].team)
        if scope not in flags:
            flags[scope] = (is_enabled(COMPATIBILITY_FLAG, environment=scope[0], team=scope[1]),
                            persisted if persisted is not None else
                            is_enabled(PERSISTED_FLAG, environment=scope[0], team=scope[1]))
    return flags


def place_batch(items: list[BatchItem]) -> list[BatchOutcome]:
    """Place every item in one transaction; one outcome per item, in order (see the module docstring)."""
    outcomes = [BatchOutcome(subject_type=str(item.subject_type), subject_id=str(item.subject_id)) for item in items]
    pending = _validate(items, outcomes)
    flags = _flags(items, pending)
    stored = writes.existing([(outcomes[i].subject_type, outcomes[i].subject_id) for i in pending
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

    def write(plans: list[Plan], outcomes: list[BatchOutcome], changed: set[str]) -> set[int]:
        lost, ids, changed_now = writes.placements_write(plans, unplaced=unplaced)
        changed |= changed_now
        for plan in plans:
            if plan.index not in lost:
                outcomes[plan.index].placement_id = ids.get(plan.index)
        return lost

    return _rounds(items, todo, outcomes, flags, write)


def _group_counts(items: list[BatchItem], todo: list[int]) -> dict[str, dict[str, int]]:
    """The stored placements per Grove of every spread group in the batch (one query per group)."""
    return {group: selectors.group_counts(group) for group in sorted({items[i].group for i in todo if items[i].group})}


def _rounds(items: list[BatchItem], todo: list[int], outcomes: list[BatchOutcome], flags: dict, write) -> list[
        BatchOutcome]:
    """Decide ``todo`` in memory and ``write`` them in one transaction, again after a conflict (up to
    ``DECIDE_ATTEMPTS``); ``write(plans, outcomes, changed)`` returns the plan indexes that lost their subject
    and adds the Groves that changed under the batch to ``changed``. The
    cyclic garbage collector is held off meanwhile (``collection_paused``)."""
    with collection_paused():
        return _rounds_of(items, todo, outcomes, flags, write)


def _rounds_of(items: list[BatchItem], todo: list[int], outcomes: list[BatchOutcome], flags: dict, write) -> list[
        BatchOutcome]:
    plans: list[Plan] = []
    for _attempt in range(services.DECIDE_ATTEMPTS):
        if not todo:
            return outcomes
        for position in todo:
            outcomes[position].error = None
        plans = []
        groups = _group_counts(items, todo)
        with snapshot.held() as (index, cutoff):
            round_ = _Round(index, cutoff, groups)
            for position in todo:
                item = items[position]
                try:
                    plans.append(round_.decide(item, position, flags[(item.environment, item.team)][0]))
                except ForestError as error:
                    outcomes[position].error = error
        refused = {position for position in todo if outcomes[position].error is not None}
        stored_plans = [p for p in plans if flags[(items[p.index].environment, items[p.index].team)][1]]
        changed: set[str] = set()
        try:
            lost = _write_where_held(write, stored_plans, outcomes, changed)
        except ledger.Conflicted as conflict:
            snapshot.fleet_reload(changed | conflict.grove_ids)
            continue
        except (OperationalError, pg_errors.DeadlockDetected) as error:
            if not _deadlock(error):
                raise
            # Another batch held what this one wanted, in the other order: decide again from the database.
            snapshot.fleet_reload({plan.facts.id for plan in plans})
            continue
        if stored_plans:
            snapshot.assume([pair for pair in round_.assumed() if pair[0].id not in changed])
        redo = []
        for plan in plans:
            outcome = outcomes[plan.index]
            if plan.facts.id in changed:
                redo.append(plan.index)
                continue
            if plan.index in lost:
                continue
            outcome.grove_id, outcome.grove_slug = plan.facts.id, plan.facts.slug
            outcome.selected_platform, outcome.decision = plan.decision["selected_platform"], plan.decision
            outcome.would_refuse = plan.would_refuse
        _reread_lost(lost, outcomes, items, flags)
        if not changed:
            return outcomes
        # The subjects decided onto Groves that changed (and any refused from the same stale view) are
        # decided again after those Groves are re-read; the rest of the batch is written already.
        snapshot.fleet_reload(changed)
        todo = sorted(set(redo) | refused)
        plans = [plan for plan in plans if plan.index in redo]
    for plan in plans:
        outcomes[plan.index].error = services.fleet_changed()
    return outcomes


def _write_where_held(write, plans: list[Plan], outcomes: list[BatchOutcome], changed: set[str]) -> set[int]:
    """``write`` the plans in one transaction. Groves that changed under some of them (another batch or
    process placed on the same units since the snapshot) are added to ``changed``, and only the plans on
    every other Grove are written: one busy Grove does not send a whole batch back to be decided again (two
    workers spreading over one fleet collide on a few units per batch; all-or-nothing lost whole batches to
    ``fleet_changed`` at a million). ``placements_write`` takes those plans out itself; a writer that can
    only refuse all or nothing (``Conflicted``) has the rest written in a transaction of its own (verified
    under the lock again). Raises ``Conflicted`` if the rest changed too."""
    try:
        with transaction.atomic():
            return write(plans, outcomes, changed)
    except ledger.Conflicted as conflict:
        changed |= conflict.grove_ids
    with transaction.atomic():
        return write([plan for plan in plans if plan.facts.id not in changed], outcomes, changed)


def _reread_lost(lost: set[int], outcomes: list[BatchOutcome], items: list[BatchItem], flags: dict) -> None:
    """Subjects another call placed between the batch's read and its insert: theirs is the placement."""
    if not lost:
        return
    found = writes.existing([(outcomes[i].subject_type, outcomes[i].subject_id) for i in lost])
    for index in lost:
        placement = found.get((outcomes[index].subject_type, outcomes[index].subject_id))
        if placement is None or placement.outcome != Outcome.PLACED:
            outcomes[index].error = services.fleet_changed()
        else:
            _reused(outcomes[index], placement, flags[(items[index].environment, items[index].team)][0])


def replace_batch(*, placements: list[ExecutionPlacement], actor, reason: str,
                  target: str | None = None) -> list[BatchOutcome]:
    """Staff only: choose afresh for many stored placements at once (``services.placement_replace`` for
    each, decided and written as one batch): each row keeps its earlier decision in ``history``."""
    reason = services.replace_reason(actor, reason)
    if len(placements) > MAX_BATCH_SIZE:
        raise ValidationFailed("batch_too_large", f"A batch re-places at most {MAX_BATCH_SIZE} placements.",
                               field="placements")
    items = [BatchItem(subject_type=p.subject_type, subject_id=p.subject_id,
                       requirement=ExecutionRequirement.from_stored(p.requirement), target=target,
                       team=p.team or None, environment=p.environment or None, group=p.spread_group or None)
             for p in placements]
    outcomes = [BatchOutcome(subject_type=p.subject_type, subject_id=p.subject_id, placement_id=p.pk)
                for p in placements]
    flags = _flags(items, range(len(items)), persisted=True)

    def write(plans: list[Plan], outcomes: list[BatchOutcome], changed: set[str]) -> set[int]:
        writes.replacements_write(plans, {plan.index: placements[plan.index].pk for plan in plans}, actor=actor,
                                  reason=reason)
        return set()

    outcomes = _rounds(items, list(range(len(items))), outcomes, flags, write)
    log.info("placements replaced", extra={"count": sum(o.error is None for o in outcomes), "actor": str(actor)})
    return outcomes
