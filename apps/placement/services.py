"""Placement services: decide (through ``decide.decide``), persist, re-read on retry, re-place, pre-check.

``placement_decide`` and ``placement_preview`` read only (the preview API uses them as they are).
``place_execution`` adds the two switches: ``host.deploy.forest_compatibility`` (off: an incompatible
placement is still made, recorded and logged as *would refuse*; on: refused before any dispatch) and
``host.deploy.persisted_placement`` (on: one ``ExecutionPlacement`` per subject, re-read by retries).

A decision reads Groves only as ``rules.GroveFacts`` (from the fleet snapshot, or for an explicit target
built the same way from the database); the ``Grove`` model is loaded inside the write (``writes``), where
the chosen Grove is re-verified and becomes the placement's foreign key. A refusal or a wait is never
answered from a stale view: it is decided again on a refreshed snapshot first (``decide_fresh``).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.accelerators.services import accelerator_policy_check
from apps.accelerators.vocabulary import POLICY_FLAG
from apps.core.errors import Conflict, Forbidden, ForestError, Gone, ValidationFailed
from apps.flags.selectors import is_enabled
from apps.groves.models import Grove
from apps.placement import admission, rules, selectors, snapshot, writes
from apps.placement.admission import FitState
from apps.placement.choices import COMPATIBILITY_FLAG, PERSISTED_FLAG, Chooser, Outcome, SubjectType
from apps.placement.decide import (
    CANDIDATE_LIMIT,
    Decision,
    Loads,
    Ranked,
    WaitingForCapacity,
    decide,
    target_facts,
    verdict,
)
from apps.placement.judging import fit_on
from apps.placement.models import ExecutionPlacement
from apps.placement.requirements import ExecutionRequirement
from apps.placement.vocabulary import WAITING_FOR_CAPACITY

log = logging.getLogger(__name__)

# A decision from the fleet snapshot whose Grove no longer holds in the database is redone after a
# refresh; this many tries before giving up (only a Grove changing again and again gets there).
DECIDE_ATTEMPTS = 3


@dataclass
class PlacementResult:
    grove: Grove | None
    selected_platform: str
    decision: dict
    placement: ExecutionPlacement | None
    would_refuse: bool
    reused: bool = False


@dataclass
class PlanCheck:
    never_placeable: bool
    reasons: list[dict] = field(default_factory=list)


def subject_label(subject_type: str, subject_id: str) -> str:
    """The subject as the chooser hashes it (the sampling ring and the tie-break): ``type:id``."""
    return f"{subject_type}:{subject_id}" if subject_type else ""


def loads_for(group: str | None) -> Loads:
    """The loads a single decision reads from the database: its spread group's placements per Grove (free
    counts and claims are the snapshot's own facts, kept current)."""
    return Loads(group=selectors.group_counts(group)) if group else Loads()


def placement_decide(*, requirement: ExecutionRequirement, target: str | None = None,
                     enforced: bool = False, admit_now: bool = True, subject: str = "",
                     group: str | None = None) -> Decision:
    """Choose a Grove and explain it (``decide.decide``), from the fleet snapshot. Reads only; a refusal (or
    ``WaitingForCapacity``) is returned in ``decision.refusal``, not raised."""
    return decide(requirement, target=target, enforced=enforced, admit_now=admit_now, subject=subject,
                  loads=loads_for(group))


def decide_fresh(requirement: ExecutionRequirement, *, target: str | None = None, enforced: bool = False,
                 admit_now: bool = True, subject: str = "", group: str | None = None) -> Decision:
    """A decision to answer with: a refusal or a wait from the snapshot is decided again on a refreshed
    snapshot first (a Grove that enrolled or reported a moment ago must not be missed), as writes re-verify
    what they store."""
    decision = placement_decide(requirement=requirement, target=target, enforced=enforced, admit_now=admit_now,
                                subject=subject, group=group)
    if decision.refusal is not None and decision.chooser != Chooser.EXPLICIT:
        snapshot.fleet_refresh()
        decision = placement_decide(requirement=requirement, target=target, enforced=enforced, admit_now=admit_now,
                                    subject=subject, group=group)
    return decision


def placement_preview(*, requirement: ExecutionRequirement, environment: str | None = None,
                      team: str | None = None, subject: str = "", group: str | None = None) -> Decision:
    """What dispatch would decide now: the same decision (compatibility, resources, accelerators after
    Host's claims, scores; for ``subject`` and its ``group`` the very ranking its dispatch makes), then, with
    ``host.accelerators.policy`` on, the same policy check a claim makes (entitlement, concurrency, budget),
    read without locks. A refusal is re-verified on a refreshed snapshot. Stores nothing."""
    enforced = is_enabled(COMPATIBILITY_FLAG, environment=environment, team=team)
    decision = decide_fresh(requirement, enforced=enforced, subject=subject, group=group)
    if (decision.refusal is None and requirement.accelerators is not None and decision.fit is not None
            and decision.fit.admission is not None and is_enabled(POLICY_FLAG, team=team)):
        try:
            accelerator_policy_check(team=team, admission=decision.fit.admission,
                                     count=requirement.accelerators.count, now=timezone.now(), lock=False)
        except ForestError as exc:
            decision.refusal, decision.outcome = exc, Outcome.REFUSED
            decision.grove, decision.selected_platform = None, ""
    return decision


_SUBJECT_TYPES = frozenset(SubjectType.values)


def subject_key(subject_type: str, subject_id: str) -> tuple[str, str]:
    """A subject's (type, id), validated (``invalid_choice``, ``invalid_value``)."""
    if subject_type not in _SUBJECT_TYPES:
        raise ValidationFailed("invalid_choice", f"Subject type must be one of {', '.join(SubjectType.values)}.",
                               field="subject_type")
    subject_id = str(subject_id).strip()
    if not subject_id or len(subject_id) > 200:
        raise ValidationFailed("invalid_value", "A subject id is 1 to 200 characters.", field="subject_id")
    return subject_type, subject_id




def placement_reuse(placement: ExecutionPlacement, *, enforced: bool) -> PlacementResult:
    """A retry: the stored Grove, or a clear refusal; never a silent move to another Grove."""
    grove = placement.grove
    if grove is None or not grove.enabled:
        raise Gone("placed_grove_gone",
                   f"{placement.subject_type} {placement.subject_id} was placed on Grove {placement.grove_slug}, "
                   f"which is {'disabled' if grove else 'gone'}; staff can re-place it.",
                   extra={"placement_id": placement.pk, "grove": placement.grove_slug})
    requirement = ExecutionRequirement.from_stored(placement.requirement)
    found = rules.check(requirement, snapshot.grove_facts(grove))
    recorded = {item["code"] for item in placement.decision.get("incompatibilities", [])}
    changed = [item for item in found if item.code not in recorded]
    if changed or (found and enforced):
        raise Conflict("placed_grove_incompatible",
                       f"{placement.subject_type} {placement.subject_id} is placed on Grove {grove.slug}, which can no "
                       "longer run it: " + " ".join(item.message for item in found) + " Staff can re-place it.",
                       extra={"placement_id": placement.pk, "incompatibilities": [i.to_json() for i in found]})
    if found:
        log.warning("placement would refuse (retry)", extra={"subject": f"{placement.subject_type}:"
                                                                        f"{placement.subject_id}",
                                                             "grove": grove.slug, "codes": sorted(recorded)})
    return PlacementResult(grove=grove, selected_platform=placement.selected_platform, decision=placement.decision,
                           placement=placement, would_refuse=bool(found), reused=True)


def log_decision(subject: str, decision) -> None:
    """The log line of a refusal or a would-refuse placement (anything with the ``Decision`` fields read)."""
    if decision.refusal is not None:
        log.warning("placement refused", extra={"subject": subject, "code": decision.refusal.code,
                                                "summary": decision.summary})
    elif decision.would_refuse:
        log.warning("placement would refuse", extra={
            "subject": subject, "grove": decision.grove.slug,
            "codes": [item["code"] for item in decision.incompatibilities]})


def _admitted_on_stored(result: PlacementResult) -> PlacementResult:
    """A re-read placement still needs room now on its stored Grove: wait for it there, or refuse when the
    Grove can no longer ever hold the work (never a silent move to another Grove)."""
    grove, requirement = result.grove, ExecutionRequirement.from_stored(result.placement.requirement)
    facts = snapshot.load_facts(Grove.objects.filter(pk=grove.pk))[0]
    fit = fit_on(admission.Needs.of(requirement), facts)
    if fit.state == FitState.LATER:
        raise WaitingForCapacity(f"Waiting for capacity on its stored Grove {grove.slug}: {fit.message}",
                                 groves=[facts.id], extra={"candidates": [
                                     verdict(requirement, Ranked(facts, 0, fit.now, fit), facts, [], rank=1)]})
    if fit.state == FitState.NEVER:
        raise Conflict(fit.code, f"Its stored Grove {grove.slug} can no longer hold this work: {fit.message} "
                       "Staff can re-place it.", extra={"placement_id": result.placement.pk})
    return result


def place_execution(*, subject_type: str, subject_id: str, requirement: ExecutionRequirement,
                    target: str | None = None, team: str | None = None, environment: str | None = None,
                    admit_now: bool = True, group: str | None = None) -> PlacementResult:
    """Place one subject. A retry (same subject) re-reads its stored placement instead of choosing again.
    ``group`` (e.g. ``run:<id>``) is the subject's spread group: the run-spread plugin keeps its members apart.

    ``admit_now`` (dispatch): the Grove must hold the work now, else ``WaitingForCapacity`` is raised (the
    caller queues it); off (a pin stored before the run starts), capacity only refuses what never fits."""
    subject_type, subject_id = subject_key(subject_type, subject_id)
    enforced = is_enabled(COMPATIBILITY_FLAG, environment=environment, team=team)
    persisted = is_enabled(PERSISTED_FLAG, environment=environment, team=team)
    if persisted:
        existing = selectors.placement_for_subject(subject_type=subject_type, subject_id=subject_id)
        if existing is not None:
            result = placement_reuse(existing, enforced=enforced)
            return _admitted_on_stored(result) if admit_now else result
    for _attempt in range(DECIDE_ATTEMPTS):
        decision = decide_fresh(requirement, target=target, enforced=enforced, admit_now=admit_now,
                                subject=subject_label(subject_type, subject_id), group=group)
        log_decision(f"{subject_type}:{subject_id}", decision)
        if decision.refusal is not None:
            raise decision.refusal
        body = decision.to_json()
        try:
            with transaction.atomic():
                grove = writes.still_holds(decision, requirement)
                result = PlacementResult(grove=grove, selected_platform=decision.selected_platform, decision=body,
                                         placement=None, would_refuse=decision.would_refuse)
                if not persisted:
                    return result
                result.placement = writes.placement_create(
                    subject_type=subject_type, subject_id=subject_id, grove=grove, decision=decision, body=body,
                    requirement=requirement, enforced=enforced, team=team, environment=environment, group=group)
        except writes.SnapshotBehind:
            snapshot.fleet_refresh()
            continue
        except IntegrityError:
            # A concurrent call for the same subject won; its row is the placement, exactly as for a retry.
            existing = selectors.placement_for_subject(subject_type=subject_type, subject_id=subject_id)
            if existing is None:
                raise
            return placement_reuse(existing, enforced=enforced)
        return result
    raise fleet_changed()


def fleet_changed() -> Conflict:
    return Conflict("fleet_changed", "The Groves changed while this work was being placed, several times in a "
                    "row; try again.")


def placement_record_unplaced(*, subject_type: str, subject_id: str, requirement: ExecutionRequirement,
                              error: ForestError, team: str | None = None,
                              environment: str | None = None) -> ExecutionPlacement | None:
    """Store a refused or waiting decision (subject, requirement, code, verdicts) so it can be listed and
    explained. Call it *outside* the transaction the refusal rolled back. A subject's placement is never
    overwritten (a retry's refusal is the node's, told by its reason); a repeated refusal updates the row.
    None when placements are not persisted."""
    subject_type, subject_id = subject_key(subject_type, subject_id)
    if not is_enabled(PERSISTED_FLAG, environment=environment, team=team):
        return None
    decided = error.decision or {}
    outcome = Outcome.WAITING if error.code == WAITING_FOR_CAPACITY else Outcome.REFUSED
    body = {**decided, "outcome": outcome, "code": error.code, "detail": error.detail,
            "candidates": decided.get("candidates") or error.extra.get("candidates", []),
            "reasons": error.extra.get("reasons", [])}
    fields = {"grove": None, "grove_slug": "", "selected_platform": "", "requirement": requirement.to_json(),
              "decision": body, "chooser": decided.get("chooser") or Chooser.SELECTION,
              "enforced": is_enabled(COMPATIBILITY_FLAG, environment=environment, team=team), "would_refuse": False,
              "outcome": outcome, "code": error.code[:64], "team": team or "", "environment": environment or ""}
    return writes.unplaced_store(subject_type=subject_type, subject_id=subject_id, fields=fields)


def placement_pin(*, subject_type: str, subject_id: str, requirement: ExecutionRequirement, grove: str,
                  team: str | None = None, environment: str | None = None) -> PlacementResult:
    """Validate and store an explicit Grove pin before a run starts (compute jobs), capacity aside (the
    pinned work waits for its Grove at dispatch). The pin is the subject's placement row, so it records
    the team and environment the work runs for (the report counts by team, and the flags are read for
    them) exactly as an unpinned placement does."""
    result = place_execution(subject_type=subject_type, subject_id=subject_id, requirement=requirement, target=grove,
                             team=team, environment=environment, admit_now=False)
    if result.reused and result.grove is not None and grove not in (str(result.grove.id), result.grove.slug):
        raise Conflict("placement_exists",
                       f"{subject_type} {subject_id} is already placed on Grove {result.grove.slug}.")
    return result


def placement_replace(*, placement: ExecutionPlacement, actor, reason: str, target: str | None = None,
                      requirement: ExecutionRequirement | None = None) -> PlacementResult:
    """Staff only: choose afresh for a stored placement (its Grove is gone or incompatible), keeping history."""
    reason = replace_reason(actor, reason)
    requirement = requirement or ExecutionRequirement.from_stored(placement.requirement)
    enforced = is_enabled(COMPATIBILITY_FLAG, environment=placement.environment or None,
                          team=placement.team or None)
    for _attempt in range(DECIDE_ATTEMPTS):
        # Capacity is dispatch's to wait for: a re-placement only refuses what could never fit.
        decision = decide_fresh(requirement, target=target, enforced=enforced, admit_now=False,
                                subject=subject_label(placement.subject_type, placement.subject_id),
                                group=placement.spread_group or None)
        log_decision(f"{placement.subject_type}:{placement.subject_id}", decision)
        if decision.refusal is not None:
            raise decision.refusal
        try:
            row = writes.replace_row(placement, decision, requirement, actor=actor, reason=reason,
                                     enforced=enforced)
            break
        except writes.SnapshotBehind:
            snapshot.fleet_refresh()
    else:
        raise fleet_changed()
    log.info("placement replaced", extra={"placement_id": row.pk, "grove": row.grove_slug, "actor": str(actor)})
    return PlacementResult(grove=row.grove, selected_platform=row.selected_platform, decision=row.decision,
                           placement=row, would_refuse=row.would_refuse)


def replace_reason(actor, reason: str) -> str:
    """The checks every re-place makes (staff only, a reason given); the reason, stripped."""
    if not getattr(actor, "is_staff", False):
        raise Forbidden("staff_only", "Only staff can re-place a stored placement.")
    if not reason or not reason.strip():
        raise ValidationFailed("reason_required", "Say why this placement is being re-placed.", field="reason")
    return reason.strip()


def placement_capacity(*, grove_id: str) -> tuple[rules.GroveFacts, list[admission.UnitCapacity],
                                                  dict[tuple[str, str], int]] | None:
    """A Grove's facts, its units (allocatable and free) and Host's active claims on it, read now: what the
    admission queue's wake-up fits waiting work into. None when the Grove is gone, disabled or stale."""
    found = snapshot.load_facts(Grove.objects.filter(pk=grove_id))
    if not found or not found[0].enabled or found[0].stale(snapshot.stale_cutoff()):
        return None
    facts = found[0]
    return facts, list(admission.units_of(facts)), dict(facts.claimed)


def _never_fits(requirement: ExecutionRequirement, groves: list[rules.GroveFacts]) -> list[dict]:
    """Per-Grove reasons when no compatible Grove could *ever* hold the work (capacity aside it could):
    empty as soon as one could, now or later."""
    needs = admission.Needs.of(requirement)
    fits = {facts.id: fit_on(needs, facts) for facts in groves}
    if any(fit.state != FitState.NEVER for fit in fits.values()):
        return []
    return [{"code": fits[facts.id].code, "message": fits[facts.id].message, "grove": facts.slug} for facts in groves]


def _plan_reasons(requirement: ExecutionRequirement) -> list[dict]:
    """Why no Grove could ever run this work (empty when one could), from the snapshot (a target: the
    database): the target's own reasons; else the eligible Groves' resource reasons; else the rules' codes
    of a sample of the others; else ``no_fresh_grove``."""
    if requirement.target is not None:
        grove = target_facts(requirement.target.grove_id)
        if grove is None:
            return [{"code": "grove_not_found", "message": f"No Grove '{requirement.target.grove_id}'."}]
        reasons = [{"code": item.code, "message": item.message} for item in rules.check(requirement, grove)]
        if not grove.enabled:
            reasons.append({"code": "grove_disabled", "message": f"Grove {grove.slug} is disabled."})
        return reasons or _never_fits(requirement, [grove])
    found = snapshot.candidates(requirement, limit=CANDIDATE_LIMIT)
    if found.eligible_total:
        if found.eligible_total > len(found.eligible):
            return []
        return _never_fits(requirement, [candidate.facts for candidate in found.eligible])
    seen: dict[str, dict] = {}
    for candidate in found.others:
        for item in rules.check(requirement, candidate.facts):
            seen.setdefault(item.code, {"code": item.code, "message": item.message})
    return list(seen.values()) or [{"code": "no_fresh_grove",
                                    "message": "No fresh, enabled Grove is reporting at all."}]


def placement_plan_check(*, requirement: ExecutionRequirement, environment: str | None = None,
                         team: str | None = None) -> PlanCheck:
    """At plan time: could any fresh Grove ever run this — compatible, and with a unit whose allocatable
    CPU, memory and accelerators hold it (free capacity aside)? Refused (``never_placeable``, with the
    per-Grove reasons) when enforcement is on, logged as a warning when off."""
    enforced = is_enabled(COMPATIBILITY_FLAG, environment=environment, team=team)
    reasons = _plan_reasons(requirement)
    if reasons and requirement.target is None:
        # A permanent refusal is never issued from a stale view: decide again on a refreshed snapshot.
        snapshot.fleet_refresh()
        reasons = _plan_reasons(requirement)
    check = PlanCheck(never_placeable=bool(reasons), reasons=reasons)
    if check.never_placeable:
        log.warning("never placeable at plan time", extra={"codes": [r["code"] for r in reasons],
                                                           "enforced": enforced})
        if enforced:
            raise ValidationFailed("never_placeable",
                                   "No fresh Grove could ever run this node: "
                                   + " ".join(r["message"] for r in reasons),
                                   extra={"reasons": reasons})
    return check
