"""Placement's writes: placement rows (one, or a batch's by ``COPY``), shared verdicts, the unit-load ledger,
superseded refusals and staff re-placements, each after re-verifying against the database what the
decision read from the fleet snapshot. Decisions are ``decide``'s; the services and the batch call these.
(Accelerator claims are the accelerators app's, taken at dispatch under the same unit-row lock.)
"""
from __future__ import annotations

import json
from collections import defaultdict

from django.db import IntegrityError, connection, transaction
from django.utils import timezone
from psycopg import errors as pg_errors

from apps.core.db import copy_field, copy_text, pg_array, sql_from_meta
from apps.groves.models import Grove
from apps.placement import rules, selectors, snapshot, vocabulary
from apps.placement.choices import Chooser, Outcome
from apps.placement.ledger import Conflicted, ledger_write, verified, verify
from apps.placement.models import ExecutionPlacement, PlacementVerdicts
from apps.placement.plan import Plan
from apps.placement.requirements import ExecutionRequirement

# The fields (attnames) a batch writes, in COPY order (``created_at`` and ``updated_at`` are the batch's one
# time); their columns are read from ``_meta`` where the statement is built.
COLUMNS = ("id", "subject_type", "subject_id", "grove_id", "grove_slug", "selected_platform", "requirement",
           "decision", "chooser", "enforced", "would_refuse", "team", "environment", "created_at", "updated_at",
           "history", "verdicts_key", "outcome", "code", "spread_group")


class SnapshotBehind(Exception):
    """The Grove chosen from the fleet snapshot no longer holds in the database."""


# --- one placement ----------------------------------------------------------------------------------------

def still_holds(decision, requirement: ExecutionRequirement) -> Grove:
    """Inside the write: the chosen Grove, read from the database (the model, for the placement's foreign
    key), when it is still enabled, fresh, and exactly as compatible as the decision says (no
    incompatibility, or the same ones for a shadow-mode fallback); else ``SnapshotBehind``.
    An explicit target was read from the database by this very decision: it only has to still exist."""
    grove = selectors.grove_by_reference(decision.grove.id)
    if grove is None:
        raise SnapshotBehind
    if decision.chooser == Chooser.EXPLICIT:
        return grove
    if not grove.enabled or grove.stale:
        raise SnapshotBehind
    found = {item.code for item in rules.check(requirement, snapshot.grove_facts(grove))}
    if found != {item["code"] for item in decision.incompatibilities}:
        raise SnapshotBehind
    return grove


def unplaced_summary(row: ExecutionPlacement) -> dict:
    """What a placement keeps of the refusal or wait it supersedes (``decision.earlier``)."""
    return {"outcome": row.outcome, "code": row.code, "detail": row.decision.get("detail", ""),
            "decided_at": row.updated_at.isoformat()}


def _unplaced_taken(subject_type: str, subject_id: str) -> dict | None:
    """Inside the write of a placement: remove the subject's stored refusal or wait (it is superseded) and
    return its outcome, code and time for the new row's decision."""
    row = (ExecutionPlacement.objects.select_for_update().filter(subject_type=subject_type, subject_id=subject_id)
           .exclude(outcome=Outcome.PLACED).first())
    if row is None:
        return None
    row.delete()
    return unplaced_summary(row)


def placement_create(*, subject_type: str, subject_id: str, grove: Grove, decision, body: dict,
                     requirement: ExecutionRequirement, enforced: bool, team: str | None, environment: str | None,
                     group: str | None) -> ExecutionPlacement:
    """Inside the caller's transaction: the subject's placement row (its stored refusal or wait superseded
    and kept under ``decision.earlier``)."""
    unplaced = _unplaced_taken(subject_type, subject_id)
    if unplaced:
        body["earlier"] = unplaced
    return ExecutionPlacement.objects.create(
        subject_type=subject_type, subject_id=subject_id, grove=grove, grove_slug=grove.slug,
        selected_platform=decision.selected_platform, requirement=requirement.to_json(), decision=body,
        chooser=decision.chooser, enforced=enforced, would_refuse=decision.would_refuse, team=team or "",
        environment=environment or "", spread_group=group or "")


def unplaced_store(*, subject_type: str, subject_id: str, fields: dict) -> ExecutionPlacement | None:
    """A refused or waiting decision's row: created, or the subject's earlier unplaced row updated; a
    placed row is never overwritten (it is returned as it is)."""
    with transaction.atomic():
        row = (ExecutionPlacement.objects.select_for_update()
               .filter(subject_type=subject_type, subject_id=subject_id).first())
        if row is not None and row.outcome == Outcome.PLACED:
            return row
        if row is None:
            try:
                with transaction.atomic():
                    return ExecutionPlacement.objects.create(subject_type=subject_type, subject_id=subject_id,
                                                             **fields)
            except IntegrityError:  # a concurrent decision for the subject won: it is the truth
                return selectors.placement_for_subject(subject_type=subject_type, subject_id=subject_id)
        for key, value in fields.items():
            setattr(row, key, value)
        row.save()
    return row


def replace_row(placement: ExecutionPlacement, decision, requirement: ExecutionRequirement, *, actor,
                reason: str, enforced: bool) -> ExecutionPlacement:
    """A staff re-placement of one stored row, its earlier decision kept in ``history``."""
    with transaction.atomic():
        grove = still_holds(decision, requirement)
        row = ExecutionPlacement.objects.select_for_update().get(pk=placement.pk)
        row.history = [*row.history, {
            "grove_id": str(row.grove_id) if row.grove_id else None, "grove_slug": row.grove_slug,
            "selected_platform": row.selected_platform, "decision": row.decision,
            "replaced_at": timezone.now().isoformat(), "replaced_by": actor.get_username(), "reason": reason.strip(),
        }]
        body = decision.to_json()
        row.grove, row.grove_slug = grove, grove.slug
        row.selected_platform, row.requirement, row.decision = decision.selected_platform, requirement.to_json(), body
        row.chooser, row.enforced, row.would_refuse = decision.chooser, enforced, decision.would_refuse
        row.outcome, row.code = Outcome.PLACED, ""
        row.save()
    return row


# --- a batch ----------------------------------------------------------------------------------------------

def existing(keys: list[tuple[str, str]]) -> dict[tuple[str, str], ExecutionPlacement]:
    """The stored rows (placed, waiting or refused) of these subjects, by (type, id)."""
    by_type: dict[str, list[str]] = defaultdict(list)
    for subject_type, subject_id in keys:
        by_type[subject_type].append(subject_id)
    found = {}
    for subject_type, ids in by_type.items():
        if connection.vendor == "postgresql":
            # Which exist, in one array parameter (the ORM's IN of thousands of placeholders costs more
            # than the query), as one probe of the unique (subject_type, subject_id) index per id: a join to
            # the unnested array, never ``subject_id = ANY(...)``, which stale statistics turned into a bitmap
            # scan of every row of the subject type (1.5 s at a million rows). Only hits are read whole.
            with connection.cursor() as cursor:
                cursor.execute(sql_from_meta(
                    "SELECT p.{p.subject_id} FROM unnest(%s::text[]) AS wanted(subject_id) JOIN {p} p "
                    "ON p.{p.subject_type} = %s AND p.{p.subject_id} = wanted.subject_id", p=ExecutionPlacement),
                    [pg_array(ids), subject_type])
                ids = [row[0] for row in cursor.fetchall()]
            if not ids:
                continue
        for row in ExecutionPlacement.objects.select_related("grove").filter(subject_type=subject_type,
                                                                             subject_id__in=ids):
            found[(row.subject_type, row.subject_id)] = row
    return found


def placements_write(plans: list[Plan], *, unplaced: dict[tuple[str, str], ExecutionPlacement] | None = None
                     ) -> tuple[set[int], dict[int, int], set[str]]:
    """Inside the batch's transaction: the placements, then the verify under the units' lock, then the shared
    verdicts and the ledger. Returns the plan indexes whose subject another call placed first (nothing
    written for them), the placement id of each plan written, and the Groves that changed under the batch
    (their plans' rows are taken out again before commit; the caller decides those subjects again).
    ``unplaced``: the subjects' stored refusals and waits, removed here and kept in the new decision.

    The ``COPY`` comes before the unit locks, not after: it is the long part of the write (a second at a
    million rows, index maintenance), and a batch holding its units across it made the other worker's
    batch wait for its whole write on the units both place on (with spread, every batch shares units with
    the next): at a million rows the two workers ran one after the other, the rate halved. The locks are now
    held for the verify, the ledger and the commit only."""
    if not plans:
        return set(), {}, set()
    superseded = {}
    if unplaced:
        for plan in plans:
            row = unplaced.get((plan.subject_type, plan.subject_id))
            if row is not None:
                plan.note("earlier", unplaced_summary(row))
                superseded[plan.index] = row.pk
        ExecutionPlacement.objects.filter(pk__in=list(superseded.values())).exclude(outcome=Outcome.PLACED).delete()
    now = timezone.now()
    lost, ids = _insert(plans, now)
    kept = [plan for plan in plans if plan.index not in lost]
    entries, changed = verified(kept)
    dropped = {plan.index for plan in kept if plan.facts.id in changed}
    if dropped & superseded.keys():
        # The refusal or wait such a subject supersedes is gone with this transaction: all or nothing.
        raise Conflicted(changed)
    if dropped:
        ExecutionPlacement.objects.filter(pk__in=[ids.pop(index) for index in dropped]).delete()
    verdicts_write([plan for plan in kept if plan.index not in dropped], now)
    ledger_write(plans, entries, lost | dropped)
    return lost, ids, changed


def verdicts_write(plans: list[Plan], now) -> None:
    """The plans' shared verdicts, each once: their JSON as the batch encoded it for its key (the ORM's
    ``bulk_create`` encoded each ~10 KB body again, in Python, for every batch)."""
    shapes = {plan.verdicts_key: plan.verdicts_json for plan in plans if plan.verdicts_key}
    if not shapes:
        return
    body = "%s::jsonb" if connection.vendor == "postgresql" else "%s"
    stamp = connection.ops.adapt_datetimefield_value(now)
    # In key order, as the placements are in subject order: two batches wait on each other's rows in one
    # order, never in a cycle.
    keys = sorted(shapes)
    with connection.cursor() as cursor:
        cursor.execute(sql_from_meta("INSERT INTO {v} ({v.key}, {v.body}, {v.created_at}) VALUES ", v=PlacementVerdicts)
                       + ", ".join([f"(%s, {body}, %s)"] * len(keys))
                       + sql_from_meta(" ON CONFLICT ({v.key}) DO NOTHING", v=PlacementVerdicts),
                       [value for key in keys for value in (key, shapes[key], stamp)])


def _rows(plans: list[Plan], ids: list[int | None], now) -> list[tuple]:
    rows = []
    for plan, placement_id in zip(plans, ids, strict=True):
        decision = plan.decision
        rows.append((placement_id, plan.subject_type, plan.subject_id, plan.facts.id, plan.facts.slug,
                     decision["selected_platform"], plan.requirement_json, plan.decision_json(),
                     plan.chooser, plan.enforced, plan.would_refuse, plan.team, plan.environment,
                     now, now, "[]", plan.verdicts_key, vocabulary.Outcome.PLACED.value, "", plan.group))
    return rows


def _copy_lines(plans: list[Plan], ids: list[int], now) -> str:
    """The plans' rows (``_rows``'s values, ``COLUMNS`` order) in ``COPY`` text format, built as one string:
    psycopg's ``write_row`` dumps each of a row's 20 values through its adapters in Python (a tenth of a
    batch's write CPU), and ``copy_field`` per value was still 4% of a worker's CPU at a million; here one
    f-string a row, ``copy_text`` escaping every text a caller or a Grove chose (ids, booleans, the stamps,
    the chooser and the verdicts key hold no special character). The COPY, the ``INSERT`` from ``_rows`` and
    the ORM writer write the same rows (tests/placement/test_fast_paths.py)."""
    stamp, placed, text = copy_field(now), vocabulary.Outcome.PLACED.value, copy_text
    return "".join([
        f"{placement_id}\t{text(p.subject_type)}\t{text(p.subject_id)}\t{p.facts.id}\t{text(p.facts.slug)}\t"
        f"{text(p.decision['selected_platform'])}\t{text(p.requirement_json)}\t{text(p.decision_json())}\t"
        f"{p.chooser}\t{'t' if p.enforced else 'f'}\t{'t' if p.would_refuse else 'f'}\t{text(p.team)}\t"
        f"{text(p.environment)}\t{stamp}\t{stamp}\t[]\t{p.verdicts_key}\t{placed}\t\t{text(p.group)}\n"
        for p, placement_id in zip(plans, ids, strict=True)])


def _insert(plans: list[Plan], now) -> tuple[set[int], dict[int, int]]:
    """The placements in one statement: ``COPY`` on PostgreSQL (ids drawn from the sequence first, so
    nothing needs reading back), an ORM bulk insert elsewhere. A subject placed meanwhile by another call
    makes COPY fail: then one multi-row ``INSERT … ON CONFLICT DO NOTHING`` writes the rest. Returns the
    plan indexes that lost their subject to another call, and the placement id of each other plan."""
    table = ExecutionPlacement._meta.db_table
    columns = sql_from_meta(", ".join(f"{{p.{name}}}" for name in COLUMNS), p=ExecutionPlacement)
    plans = sorted(plans, key=lambda plan: (plan.subject_type, plan.subject_id))
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT nextval(pg_get_serial_sequence('{table}', '{ExecutionPlacement._meta.pk.column}')) "
                           "FROM generate_series(1, %s::int)",
                           [len(plans)])
            ids = [row[0] for row in cursor.fetchall()]
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                raw = cursor.cursor
                with raw.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                    copy.write(_copy_lines(plans, ids, now).encode())
            return set(), {plan.index: placement_id for plan, placement_id in zip(plans, ids, strict=True)}
        except (IntegrityError, pg_errors.UniqueViolation):  # COPY runs on the raw cursor: the driver's own
            pass
        rows = _rows(plans, ids, now)
        with connection.cursor() as cursor:
            values = ", ".join(["(" + ", ".join(["%s"] * len(COLUMNS)) + ")"] * len(rows))
            cursor.execute(f"INSERT INTO {table} ({columns}) VALUES {values} " + sql_from_meta(
                "ON CONFLICT ({p.subject_type}, {p.subject_id}) DO NOTHING RETURNING {p.id}", p=ExecutionPlacement),
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
    keys = [(plan.subject_type, plan.subject_id) for plan in plans]
    found = {(row[1], row[2]): row[0] for row in ExecutionPlacement.objects.filter(
        subject_id__in=[key[1] for key in keys], created_at__gte=now).values_list("id", "subject_type", "subject_id")}
    lost, ids = set(), {}
    for plan, key in zip(plans, keys, strict=True):
        if key in found:
            ids[plan.index] = found[key]
        else:
            lost.add(plan.index)
    return lost, ids


def replacements_write(plans: list[Plan], pks: dict[int, int], *, actor, reason: str) -> None:
    """Inside a staff re-placement batch's transaction: verify, then each row's new decision, its earlier one
    kept in ``history`` (``pks``: plan index -> placement id)."""
    ledger = verify(plans)
    now = timezone.now()
    verdicts_write(plans, now)
    rows = {row.pk: row for row in ExecutionPlacement.objects.select_for_update().filter(pk__in=list(pks.values()))}
    changed = []
    for plan in plans:
        row = rows[pks[plan.index]]
        row.history = [*row.history, {
            "grove_id": str(row.grove_id) if row.grove_id else None, "grove_slug": row.grove_slug,
            "selected_platform": row.selected_platform, "decision": row.decision,
            "verdicts_key": row.verdicts_key, "replaced_at": now.isoformat(),
            "replaced_by": actor.get_username(), "reason": reason}]
        row.grove_id, row.grove_slug = plan.facts.id, plan.facts.slug
        row.selected_platform, row.decision = plan.decision["selected_platform"], plan.decision
        row.requirement = json.loads(plan.requirement_json)
        row.chooser, row.enforced, row.would_refuse = plan.chooser, plan.enforced, plan.would_refuse
        row.verdicts_key, row.updated_at = plan.verdicts_key, now
        row.outcome, row.code = Outcome.PLACED, ""
        changed.append(row)
    ExecutionPlacement.objects.bulk_update(changed, ["history", "grove_id", "grove_slug", "selected_platform",
                                                     "decision", "requirement", "chooser", "enforced",
                                                     "would_refuse", "verdicts_key", "updated_at", "outcome",
                                                     "code"])
    ledger_write(plans, ledger, set())
