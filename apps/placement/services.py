"""Placement: choose a Grove for a requirement, explain the choice, persist it, re-read it on retry.

``placement_decide`` computes a decision (reads only; the preview API uses it as is).
``place_execution`` adds the two switches: ``host.deploy.forest_compatibility`` (off: an incompatible
placement is still made, recorded and logged as *would refuse*; on: refused before any dispatch) and
``host.deploy.persisted_placement`` (on: one ``ExecutionPlacement`` per subject, re-read by retries).

A decision reads Groves only as ``rules.GroveFacts`` (from the fleet snapshot, or for an explicit target
built the same way from the database); the ``Grove`` model is loaded inside the write, where the chosen
Grove is re-verified and becomes the placement's foreign key.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.accelerators.services import accelerator_policy_check
from apps.accelerators.vocabulary import POLICY_FLAG
from apps.core.errors import Conflict, Forbidden, ForestError, Gone, NotFound, ValidationFailed
from apps.flags.selectors import is_enabled
from apps.groves.models import Grove
from apps.placement import admission, fleet, rules, selectors, snapshot
from apps.placement.admission import FitState
from apps.placement.choices import COMPATIBILITY_FLAG, PERSISTED_FLAG, Chooser, Outcome, SubjectType
from apps.placement.models import ExecutionPlacement
from apps.placement.requirements import ExecutionRequirement
from apps.placement.vocabulary import WAITING_FOR_CAPACITY

log = logging.getLogger(__name__)

# Verdicts kept per decision: the ranked eligible Groves and a sample of the others, each bounded, so a
# decision's size and cost do not grow with the fleet (totals are still counted).
CANDIDATE_LIMIT = 20
# A decision from the fleet snapshot whose Grove no longer holds in the database is redone after a
# refresh; this many tries before giving up (only a Grove changing again and again gets there).
DECIDE_ATTEMPTS = 3


@dataclass
class Decision:
    grove: rules.GroveFacts | None
    selected_platform: str
    chooser: str
    enforced: bool
    incompatibilities: list[dict]
    candidates: list[dict]
    summary: str
    eligible_total: int
    ineligible_total: int
    refusal: ForestError | None = None
    outcome: str = Outcome.PLACED
    # The chosen Grove's resource/accelerator fit (its unit, its accelerator admission), when placed.
    fit: admission.Fit | None = None

    @property
    def would_refuse(self) -> bool:
        return bool(self.incompatibilities) and self.refusal is None

    def to_json(self) -> dict:
        return {
            "grove_id": str(self.grove.id) if self.grove else None,
            "grove_slug": self.grove.slug if self.grove else None,
            "outcome": self.outcome,
            "selected_platform": self.selected_platform,
            "chooser": self.chooser,
            "enforced": self.enforced,
            "would_refuse": self.would_refuse,
            "incompatibilities": self.incompatibilities,
            "candidates": self.candidates,
            "summary": self.summary,
            "eligible_total": self.eligible_total,
            "ineligible_total": self.ineligible_total,
        }


@dataclass
class PlacementResult:
    grove: Grove | None
    selected_platform: str
    decision: dict
    placement: ExecutionPlacement | None
    would_refuse: bool
    reused: bool = False


class WaitingForCapacity(Conflict):
    """Not a refusal: the work could fit an eligible Grove, not now. ``extra["groves"]`` are the ids of the
    Groves it waits for (the admission queue files it under each); ``candidates`` say what each lacks."""

    def __init__(self, detail: str, *, groves: list[str], extra: dict | None = None):
        super().__init__(WAITING_FOR_CAPACITY, detail, extra={**(extra or {}), "groves": groves})


@dataclass
class PlanCheck:
    never_placeable: bool
    reasons: list[dict] = field(default_factory=list)


# Per-Grove results (rule checks, resource fits) kept while the Grove's facts (the same object) stand: the
# snapshot replaces a Grove's facts whenever its row, units, ledger or claims change, and the verdicts of a
# requirement shape's candidates are the same decision after decision.
_CHECKED: dict[tuple, tuple[rules.GroveFacts, list[rules.Incompatibility]]] = {}
_FITS: dict[tuple, tuple[rules.GroveFacts, admission.Fit]] = {}
_CHECKED_MAX = 50_000


def _per_facts(table: dict, key, facts: rules.GroveFacts, compute):
    """``compute(key, facts)``, kept in ``table`` under (key, slug) while ``facts`` is the Grove's."""
    hit = table.get((key, facts.slug))
    if hit is not None and hit[0] is facts:
        return hit[1]
    if len(table) >= _CHECKED_MAX:
        table.clear()
    found = compute(key, facts)
    table[(key, facts.slug)] = (facts, found)
    return found


def _checked(requirement: ExecutionRequirement, facts: rules.GroveFacts) -> list[rules.Incompatibility]:
    return _per_facts(_CHECKED, requirement, facts, rules.check)


def _incompatibility_json(items: list[rules.Incompatibility]) -> list[dict]:
    return [{"code": item.code, "message": item.message} for item in items]


def _verdict(facts: rules.GroveFacts, incompatibilities: list[rules.Incompatibility], *, rank: int | None,
             requirement: ExecutionRequirement, fits_cpu_memory: bool | None = None,
             fit: admission.Fit | None = None) -> dict:
    verdict = {
        "grove_id": facts.id, "grove_slug": facts.slug, "substrate": facts.substrate,
        "eligible": not incompatibilities, "rank": rank,
        "platform": rules.selected_platform(requirement, facts) if not incompatibilities else None,
        "incompatibilities": _incompatibility_json(incompatibilities),
    }
    if fits_cpu_memory is not None:
        verdict["fits_cpu_memory"] = fits_cpu_memory
    if fit is not None:
        verdict["fit"] = fit.to_json()
        if requirement.accelerators is not None:
            verdict["fits_accelerators"] = fit.now
            verdict["accelerator_reasons"] = [refusal.to_json() for refusal in fit.reasons]
            if fit.admission is not None and fit.admission.admitted:
                verdict["accelerator_mode"] = fit.admission.label
    return verdict


def _admissions(requirement: ExecutionRequirement,
                groves: list[rules.GroveFacts]) -> dict[str, admission.Fit]:
    """Resource admission of each Grove (``admission.fit``: CPU, memory and accelerators on one unit, now,
    later or never), from its facts: its units' free counts less Host's placements since its last report,
    and Host's accelerator claims, which the snapshot keeps current on every claim and release."""
    if not groves:
        return {}
    needs = admission.Needs.of(requirement)
    return {facts.id: _fit_cached(needs, facts) for facts in groves}


def _fit_cached(needs: admission.Needs, facts: rules.GroveFacts) -> admission.Fit:
    return _per_facts(_FITS, needs, facts, fit_on)


def fit_on(needs: admission.Needs, facts: rules.GroveFacts, *, free=None,
           claimed: dict | None = None) -> admission.Fit:
    """``needs`` admitted on one unit of this Grove, from its facts; ``free`` (unit id, free CPU, free
    memory) and ``claimed`` replace the facts' own when a batch has assumed work on the Grove."""
    return admission.fit(needs, units=admission.units_of(facts, free=free), devices=facts.devices,
                         claimed=dict(facts.claimed) if claimed is None else claimed, grove=facts.slug)


def _admit(decision: Decision, fits: list[tuple[rules.GroveFacts, admission.Fit]],
           requirement: ExecutionRequirement, *, admit_now: bool) -> Decision:
    """Resource admission over compatible Groves in chooser order: the first whose unit holds the work now
    (with ``admit_now`` off, a Grove it fits later will do: a pin checked before the run starts); else wait
    for every Grove it could fit later; else refuse, saying by how much it never fits."""
    usable = {FitState.NOW} if admit_now else {FitState.NOW, FitState.LATER}
    chosen = next(((facts, fit) for facts, fit in fits if fit.state in usable), None)
    if chosen is not None:
        decision.grove, decision.fit = chosen
        decision.selected_platform = rules.selected_platform(requirement, chosen[0])
        return decision
    decision.grove, decision.selected_platform = None, ""
    extra = {"candidates": decision.candidates, "summary": decision.summary}
    later = [(facts, fit) for facts, fit in fits if fit.state == FitState.LATER]
    if later:
        decision.outcome = Outcome.WAITING
        decision.refusal = WaitingForCapacity(
            "Waiting for capacity: " + " ".join(fit.message for _, fit in later[:3]),
            groves=[facts.id for facts, _ in later], extra=extra)
        return decision
    decision.outcome = Outcome.REFUSED
    decision.refusal = Conflict(fits[0][1].code, "No eligible Grove can ever hold this work: "
                                + " ".join(fit.message for _, fit in fits[:3]), extra=extra)
    return decision


def _ordered(requirement: ExecutionRequirement, found: list[fleet.Candidate], *, with_incompatibilities: bool):
    """(candidate, incompatibilities, admission) in the chooser's order (rules.rank_key)."""
    admissions = _admissions(requirement, [candidate.facts for candidate in found])
    rows = []
    for candidate in found:
        facts = candidate.facts
        incompatibilities = _checked(requirement, facts) if with_incompatibilities else []
        fit = admissions[facts.id]
        key = rules.rank_key(
            incompatibilities=len(incompatibilities), platform_rank=candidate.platform_rank,
            fits_cpu_memory=candidate.fits_cpu_memory, fits_accelerators=fit.now, slug=facts.slug)
        rows.append((key, candidate, incompatibilities, fit))
    rows.sort(key=lambda row: row[0])
    return [row[1:] for row in rows]


def _target(reference: str) -> rules.GroveFacts | None:
    """An explicit target's facts, read from the database now (built as the snapshot builds them)."""
    found = snapshot.load_facts(selectors.groves_by_reference(reference))
    return found[0] if found else None


def _explicit(requirement: ExecutionRequirement, reference: str, enforced: bool, admit_now: bool = True) -> Decision:
    facts = _target(reference)
    if facts is None:
        raise NotFound("grove_not_found", f"No Grove with id or slug '{reference}'.", field="target.grove_id")
    if not facts.enabled:
        raise Conflict("grove_disabled", f"Grove {facts.slug} is disabled; enable it or choose another target.",
                       field="target.grove_id")
    found = rules.check(requirement, facts)
    fits = facts.fits(requirement.resources.cpu_milli, requirement.resources.memory_bytes)
    fit = _admissions(requirement, [facts])[facts.id]
    verdict = _verdict(facts, found, rank=1 if not found else None, requirement=requirement,
                       fits_cpu_memory=fits, fit=fit)
    verdict["stale"] = facts.stale(snapshot.stale_cutoff())
    decision = Decision(
        grove=facts, selected_platform=rules.selected_platform(requirement, facts), chooser=Chooser.EXPLICIT,
        enforced=enforced, incompatibilities=[item.to_json() for item in found], candidates=[verdict],
        summary=rules.summarise([verdict]), eligible_total=0 if found else 1, ineligible_total=1 if found else 0,
    )
    if found and enforced:
        decision.refusal = Conflict(
            "placement_refused",
            f"Grove {facts.slug} cannot run this work: " + " ".join(item.message for item in found),
            extra={"incompatibilities": decision.incompatibilities, "candidates": decision.candidates})
        decision.grove, decision.selected_platform = None, ""
        return decision
    return _admit(decision, [(facts, fit)], requirement, admit_now=admit_now)


def _selection(requirement: ExecutionRequirement, enforced: bool, admit_now: bool = True) -> Decision:
    found = snapshot.candidates(requirement, limit=CANDIDATE_LIMIT)
    eligible_total, ineligible_total = found.eligible_total, found.ineligible_total
    verdicts = []
    ordered = _ordered(requirement, found.eligible, with_incompatibilities=False)
    for rank, (candidate, _found, fit) in enumerate(ordered, start=1):
        verdicts.append(_verdict(candidate.facts, [], rank=rank, requirement=requirement,
                                 fits_cpu_memory=candidate.fits_cpu_memory, fit=fit))
    for candidate in found.others:
        verdicts.append(_verdict(candidate.facts, _checked(requirement, candidate.facts), rank=None,
                                 requirement=requirement))
    plus = "+" if found.capped else ""
    summary = (f"{eligible_total}{plus}/{eligible_total + ineligible_total}{plus} fresh Groves eligible"
               + (f"; sample of the others: {rules.summarise(verdicts[len(ordered):]).split(': ', 1)[-1]}"
                  if found.others else ""))
    decision = Decision(grove=None, selected_platform="", chooser=Chooser.SELECTION, enforced=enforced,
                        incompatibilities=[], candidates=verdicts, summary=summary,
                        eligible_total=eligible_total, ineligible_total=ineligible_total)
    if ordered:
        return _admit(decision, [(candidate.facts, fit) for candidate, _, fit in ordered], requirement,
                      admit_now=admit_now)
    holders = snapshot.candidates(requirement, limit=CANDIDATE_LIMIT, role_only=True).eligible
    if not holders:
        decision.refusal = Conflict(
            "no_eligible_grove",
            f"No fresh, enabled Grove holds the {requirement.family} role; enroll one or wait for one to report.",
            extra={"candidates": verdicts, "summary": summary})
        return decision
    ranked = _ordered(requirement, holders, with_incompatibilities=True)
    candidate, found, _ = ranked[0]
    facts = candidate.facts
    decision.incompatibilities = [item.to_json() for item in found]
    if enforced:
        decision.refusal = Conflict(
            "placement_refused",
            f"No fresh Grove can run this work ({summary}); the closest, {facts.slug}: "
            + " ".join(item.message for item in found),
            extra={"incompatibilities": decision.incompatibilities, "candidates": verdicts, "summary": summary})
        return decision
    decision.chooser = Chooser.FALLBACK
    decision = _admit(decision, [(c.facts, fit) for c, _, fit in ranked], requirement, admit_now=admit_now)
    if decision.grove is not None:  # the incompatibilities recorded are the chosen Grove's own
        decision.incompatibilities = next([item.to_json() for item in incompatible]
                                          for c, incompatible, _ in ranked if c.facts.id == decision.grove.id)
    return decision


def placement_decide(*, requirement: ExecutionRequirement, target: str | None = None,
                     enforced: bool = False, admit_now: bool = True) -> Decision:
    """Choose a Grove and explain it. Reads only; a refusal (or ``WaitingForCapacity``) is returned in
    ``decision.refusal``, not raised, and ``decision.outcome`` says placed, waiting or refused.

    An explicit target (argument, else ``requirement.target``) is checked like any other Grove: a target
    never waives compatibility. Resource admission (``admission.fit``) runs on every compatible candidate.
    """
    reference = target or (requirement.target.grove_id if requirement.target else None)
    if reference:
        decision = _explicit(requirement, reference, enforced, admit_now)
    else:
        decision = _selection(requirement, enforced, admit_now)
    if decision.refusal is not None and decision.outcome == Outcome.PLACED:
        decision.outcome = Outcome.REFUSED
    if decision.refusal is not None:
        decision.refusal.decision = decision.to_json()  # what a stored refusal keeps (never in the API body)
    return decision


def placement_preview(*, requirement: ExecutionRequirement, environment: str | None = None,
                      team: str | None = None) -> Decision:
    """What dispatch would decide now: the same decision (compatibility, resources, accelerators after
    Host's claims), then, with ``host.accelerators.policy`` on, the same policy check a claim makes
    (entitlement, concurrency, budget), read without locks. Stores nothing."""
    enforced = is_enabled(COMPATIBILITY_FLAG, environment=environment, team=team)
    decision = placement_decide(requirement=requirement, enforced=enforced)
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


def _subject(subject_type: str, subject_id: str) -> tuple[str, str]:
    if subject_type not in _SUBJECT_TYPES:
        raise ValidationFailed("invalid_choice", f"Subject type must be one of {', '.join(SubjectType.values)}.",
                               field="subject_type")
    subject_id = str(subject_id).strip()
    if not subject_id or len(subject_id) > 200:
        raise ValidationFailed("invalid_value", "A subject id is 1 to 200 characters.", field="subject_id")
    return subject_type, subject_id


def _reuse(placement: ExecutionPlacement, *, enforced: bool) -> PlacementResult:
    """A retry: the stored Grove, or a clear refusal; never a silent move to another Grove."""
    grove = placement.grove
    if grove is None or not grove.enabled:
        raise Gone("placed_grove_gone",
                   f"{placement.subject_type} {placement.subject_id} was placed on Grove {placement.grove_slug}, "
                   f"which is {'disabled' if grove else 'gone'}; staff can re-place it.",
                   extra={"placement_id": placement.pk, "grove": placement.grove_slug})
    requirement = ExecutionRequirement.from_json(placement.requirement)
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


def _log_decision(subject: str, decision: Decision) -> None:
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
    grove, requirement = result.grove, ExecutionRequirement.from_json(result.placement.requirement)
    facts = snapshot.load_facts(Grove.objects.filter(pk=grove.pk))[0]
    fit = _admissions(requirement, [facts])[facts.id]
    if fit.state == FitState.LATER:
        raise WaitingForCapacity(f"Waiting for capacity on its stored Grove {grove.slug}: {fit.message}",
                                 groves=[facts.id], extra={"candidates": [
                                     _verdict(facts, [], rank=1, requirement=requirement, fit=fit)]})
    if fit.state == FitState.NEVER:
        raise Conflict(fit.code, f"Its stored Grove {grove.slug} can no longer hold this work: {fit.message} "
                       "Staff can re-place it.", extra={"placement_id": result.placement.pk})
    return result


def place_execution(*, subject_type: str, subject_id: str, requirement: ExecutionRequirement,
                    target: str | None = None, team: str | None = None,
                    environment: str | None = None, admit_now: bool = True) -> PlacementResult:
    """Place one subject. A retry (same subject) re-reads its stored placement instead of choosing again.

    ``admit_now`` (dispatch): the Grove must hold the work now, else ``WaitingForCapacity`` is raised (the
    caller queues it); off (a pin stored before the run starts), capacity only refuses what never fits."""
    subject_type, subject_id = _subject(subject_type, subject_id)
    enforced = is_enabled(COMPATIBILITY_FLAG, environment=environment, team=team)
    persisted = is_enabled(PERSISTED_FLAG, environment=environment, team=team)
    if persisted:
        existing = selectors.placement_for_subject(subject_type=subject_type, subject_id=subject_id)
        if existing is not None:
            result = _reuse(existing, enforced=enforced)
            return _admitted_on_stored(result) if admit_now else result
    for _attempt in range(DECIDE_ATTEMPTS):
        decision = _decide_current(requirement, target, enforced, admit_now)
        _log_decision(f"{subject_type}:{subject_id}", decision)
        if decision.refusal is not None:
            raise decision.refusal
        body = decision.to_json()
        try:
            with transaction.atomic():
                grove = _still_holds(decision, requirement)
                if not grove:
                    raise _SnapshotBehind
                result = PlacementResult(grove=grove, selected_platform=decision.selected_platform, decision=body,
                                         placement=None, would_refuse=decision.would_refuse)
                if not persisted:
                    return result
                unplaced = _unplaced_taken(subject_type, subject_id)
                if unplaced:
                    body["earlier"] = unplaced
                result.placement = ExecutionPlacement.objects.create(
                    subject_type=subject_type, subject_id=subject_id, grove=grove, grove_slug=grove.slug,
                    selected_platform=decision.selected_platform,
                    requirement=requirement.to_json(), decision=body, chooser=decision.chooser,
                    enforced=enforced, would_refuse=decision.would_refuse, team=team or "",
                    environment=environment or "",
                )
        except _SnapshotBehind:
            snapshot.fleet_refresh()
            continue
        except IntegrityError:
            # A concurrent call for the same subject won; its row is the placement, exactly as for a retry.
            existing = selectors.placement_for_subject(subject_type=subject_type, subject_id=subject_id)
            if existing is None:
                raise
            return _reuse(existing, enforced=enforced)
        return result
    raise _fleet_changed()


class _SnapshotBehind(Exception):
    """The Grove chosen from the fleet snapshot no longer holds in the database."""


def _fleet_changed() -> Conflict:
    return Conflict("fleet_changed", "The Groves changed while this work was being placed, several times in a "
                    "row; try again.")


def _decide_current(requirement: ExecutionRequirement, target: str | None, enforced: bool,
                    admit_now: bool = True) -> Decision:
    """A decision for work about to be dispatched: a refusal from the snapshot is checked against a
    refreshed snapshot first (a Grove that enrolled a moment ago must not be missed)."""
    decision = placement_decide(requirement=requirement, target=target, enforced=enforced, admit_now=admit_now)
    if decision.refusal is not None and decision.chooser == Chooser.SELECTION:
        snapshot.fleet_refresh()
        decision = placement_decide(requirement=requirement, target=target, enforced=enforced, admit_now=admit_now)
    return decision


def _unplaced_taken(subject_type: str, subject_id: str) -> dict | None:
    """Inside the write of a placement: remove the subject's stored refusal or wait (it is superseded) and
    return its outcome, code and time for the new row's decision."""
    row = (ExecutionPlacement.objects.select_for_update().filter(subject_type=subject_type, subject_id=subject_id)
           .exclude(outcome=Outcome.PLACED).first())
    if row is None:
        return None
    row.delete()
    return unplaced_summary(row)


def unplaced_summary(row: ExecutionPlacement) -> dict:
    """What a placement keeps of the refusal or wait it supersedes (``decision.earlier``)."""
    return {"outcome": row.outcome, "code": row.code, "detail": row.decision.get("detail", ""),
            "decided_at": row.updated_at.isoformat()}


def placement_record_unplaced(*, subject_type: str, subject_id: str, requirement: ExecutionRequirement,
                              error: ForestError, team: str | None = None,
                              environment: str | None = None) -> ExecutionPlacement | None:
    """Store a refused or waiting decision (subject, requirement, code, verdicts) so it can be listed and
    explained. Call it *outside* the transaction the refusal rolled back. A subject's placement is never
    overwritten (a retry's refusal is the node's, told by its reason); a repeated refusal updates the row.
    None when placements are not persisted."""
    subject_type, subject_id = _subject(subject_type, subject_id)
    if not is_enabled(PERSISTED_FLAG, environment=environment, team=team):
        return None
    decided = getattr(error, "decision", None) or {}
    outcome = Outcome.WAITING if error.code == WAITING_FOR_CAPACITY else Outcome.REFUSED
    body = {**decided, "outcome": outcome, "code": error.code, "detail": error.detail,
            "candidates": decided.get("candidates") or error.extra.get("candidates", []),
            "reasons": error.extra.get("reasons", [])}
    fields = {"grove": None, "grove_slug": "", "selected_platform": "", "requirement": requirement.to_json(),
              "decision": body, "chooser": decided.get("chooser") or Chooser.SELECTION,
              "enforced": is_enabled(COMPATIBILITY_FLAG, environment=environment, team=team), "would_refuse": False,
              "outcome": outcome, "code": error.code[:64], "team": team or "", "environment": environment or ""}
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


def _still_holds(decision: Decision, requirement: ExecutionRequirement) -> Grove | None:
    """Inside the write: the chosen Grove, read from the database (the model, for the placement's foreign
    key), when it is still enabled, fresh, and exactly as compatible as the decision says (no
    incompatibility, or the same ones for a shadow-mode fallback); ``None`` when it no longer holds.
    An explicit target was read from the database by this very decision: it only has to still exist."""
    grove = selectors.grove_by_reference(decision.grove.id)
    if grove is None or decision.chooser == Chooser.EXPLICIT:
        return grove
    if not grove.enabled or grove.stale:
        return None
    found = {item.code for item in rules.check(requirement, snapshot.grove_facts(grove))}
    return grove if found == {item["code"] for item in decision.incompatibilities} else None


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
    requirement = requirement or ExecutionRequirement.from_json(placement.requirement)
    enforced = is_enabled(COMPATIBILITY_FLAG, environment=placement.environment or None,
                          team=placement.team or None)
    for _attempt in range(DECIDE_ATTEMPTS):
        # Capacity is dispatch's to wait for: a re-placement only refuses what could never fit.
        decision = _decide_current(requirement, target, enforced, admit_now=False)
        _log_decision(f"{placement.subject_type}:{placement.subject_id}", decision)
        if decision.refusal is not None:
            raise decision.refusal
        try:
            row = _replace_row(placement, decision, requirement, actor=actor, reason=reason, enforced=enforced)
            break
        except _SnapshotBehind:
            snapshot.fleet_refresh()
    else:
        raise _fleet_changed()
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


def _replace_row(placement: ExecutionPlacement, decision: Decision, requirement: ExecutionRequirement, *, actor,
                 reason: str, enforced: bool) -> ExecutionPlacement:
    with transaction.atomic():
        grove = _still_holds(decision, requirement)
        if not grove:
            raise _SnapshotBehind
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
    fits = _admissions(requirement, groves)
    if any(fit.state != FitState.NEVER for fit in fits.values()):
        return []
    return [{"code": fits[facts.id].code, "message": fits[facts.id].message, "grove": facts.slug} for facts in groves]


def placement_plan_check(*, requirement: ExecutionRequirement, environment: str | None = None,
                         team: str | None = None) -> PlanCheck:
    """At plan time: could any fresh Grove ever run this — compatible, and with a unit whose allocatable
    CPU, memory and accelerators hold it (free capacity aside)? Refused (``never_placeable``, with the
    per-Grove reasons) when enforcement is on, logged as a warning when off."""
    enforced = is_enabled(COMPATIBILITY_FLAG, environment=environment, team=team)
    reasons: list[dict] = []
    if requirement.target is not None:
        grove = _target(requirement.target.grove_id)
        if grove is None:
            reasons = [{"code": "grove_not_found", "message": f"No Grove '{requirement.target.grove_id}'."}]
        else:
            reasons = _incompatibility_json(rules.check(requirement, grove))
            if not grove.enabled:
                reasons.append({"code": "grove_disabled", "message": f"Grove {grove.slug} is disabled."})
            if not reasons:
                reasons = _never_fits(requirement, [grove])
    else:
        found = snapshot.candidates(requirement, limit=CANDIDATE_LIMIT)
        if found.eligible_total:
            reasons = _never_fits(requirement, [candidate.facts for candidate in found.eligible])
            if not reasons or found.eligible_total > len(found.eligible):
                return PlanCheck(never_placeable=False)
        seen: dict[str, dict] = {}
        for candidate in found.others:
            for item in rules.check(requirement, candidate.facts):
                seen.setdefault(item.code, {"code": item.code, "message": item.message})
        reasons = list(seen.values()) or [{"code": "no_fresh_grove",
                                           "message": "No fresh, enabled Grove is reporting at all."}]
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
