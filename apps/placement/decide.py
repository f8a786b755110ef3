"""The decision core: ``decide`` — a requirement, the fleet's facts and the loads → ranked candidates with
verdicts and scores, a chosen Grove or a refusal. Reads only; stores nothing.

One function for every caller: the preview (``services.placement_preview``), the single write path
(``services.place_execution``, ``placement_replace``) and the batch (``batch.place_batch``, once per
requirement with every verdict, then once per subject over the batch's assumed loads without them).
The steps, kube-scheduler's: *filter* (``rules.RULES``: eligible or the codes; ``admission.fit``: room now,
later or never), *score* (``scoring.PLUGINS`` over every Grove with room now, weighted by the policy),
*choose* (highest total; ties by a stable hash of subject and Grove). The candidates scored are a sample
(``fleet.FleetIndex.select``: the first ``CANDIDATE_LIMIT`` Groves with room, walked by platform position
and round a ring from the subject's point), so a decision's cost does not grow with the fleet.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Protocol

from django.conf import settings

from apps.core.errors import Conflict, ForestError, NotFound
from apps.placement import admission, fleet, rules, scoring, selectors, snapshot
from apps.placement.admission import FitState
from apps.placement.choices import Chooser, Outcome
from apps.placement.judging import checked, judged
from apps.placement.requirements import ExecutionRequirement
from apps.placement.vocabulary import WAITING_FOR_CAPACITY

# Candidates a decision samples and scores, and keeps as ranked verdicts (with as many non-eligible ones): a
# decision's size and cost do not grow with the fleet (totals are still counted, up to a cap). Eight is
# kube-scheduler's percentageOfNodesToScore idea taken further: the best of eight Groves sampled round the
# ring from the subject's point spreads work as evenly as scoring all of them (power of d choices), and
# keeps a batch's per-subject cost flat (docs/decisions.md "Scoring").
CANDIDATE_LIMIT = 8
# Wider samples, tried in turn only when a full sample holds no Grove with room now (accelerators taken).
WIDER = (64, 256)


@dataclass(frozen=True)
class Loads:
    """What moves between decisions, by Grove id: each unit's free (unit id, CPU, memory) rows and Host's
    accelerator claims when a batch has assumed work beyond the snapshot's facts, and how many placements
    of the subject's spread group (one run's steps) each Grove already holds. Empty: the facts' own."""

    free: Mapping[str, Sequence] = field(default_factory=dict)
    claimed: Mapping[str, Mapping] = field(default_factory=dict)
    group: Mapping[str, int] = field(default_factory=dict)
    # A batch's memo of what ``rank`` computed per sampled Grove (its resource fit, total and columns), by
    # what they depend on (and each requirement object's needs and table, by its identity), and each Grove's
    # load version (``versions``, moved by the batch whenever it places work on the Grove): an entry stands
    # while its Grove's version does, so a placement recomputes one Grove only.
    memo: dict | None = None
    versions: Mapping[str, int] = field(default_factory=dict)


NO_LOADS = Loads()


class Fleet(Protocol):
    """Where ``decide`` samples candidates from: the fleet snapshot (``snapshot.candidates``), or a batch's
    view of it that judges room on the batch's assumed free counts."""

    def __call__(self, requirement: ExecutionRequirement, *, limit: int, role_only: bool = False,
                 start: int = 0, with_others: bool = True) -> fleet.CandidateSet: ...


@dataclass(slots=True)
class Ranked:
    """One sampled candidate as the decision judged it: its facts, platform position, resource fit, its
    score (when it has room now) and its incompatibilities (shadow-mode fallback only)."""

    facts: rules.GroveFacts
    platform_rank: int
    fits_cpu_memory: bool
    fit: admission.Fit
    score: scoring.Score | None = None
    incompatibilities: list[rules.Incompatibility] = field(default_factory=list)
    _shown: dict | None = field(default=None, repr=False)

    def score_json(self) -> dict | None:
        """``score.to_json()``, built once (a batch's stored decision shows it twice: top and scores)."""
        if self._shown is None and self.score is not None:
            self._shown = self.score.to_json()
        return self._shown


@dataclass(slots=True)
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
    ranked: list[Ranked] = field(default_factory=list)
    policy: scoring.Policy | None = None
    # "Why here": the policy, the weights, the chosen Grove's and the runner-up's every column, a sentence.
    scores: dict | None = None

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
            "scores": self.scores,
        }


class WaitingForCapacity(Conflict):
    """Not a refusal: the work could fit an eligible Grove, not now. ``extra["groves"]`` are the ids of the
    Groves it waits for (the admission queue files it under each); ``candidates`` say what each lacks."""

    def __init__(self, detail: str, *, groves: list[str], extra: dict | None = None):
        super().__init__(WAITING_FOR_CAPACITY, detail, extra={**(extra or {}), "groves": groves})


def policy_for(requirement: ExecutionRequirement) -> scoring.Policy:
    """The scoring policy and weights for this work, from settings (``PLACEMENT_POLICY``,
    ``PLACEMENT_SCORE_WEIGHTS``)."""
    return scoring.policy_for(family=requirement.family, accelerators=requirement.accelerators is not None,
                              policies=settings.PLACEMENT_POLICY, weights=settings.PLACEMENT_SCORE_WEIGHTS)


_BY_TOTAL = itemgetter(0)


def rank(requirement: ExecutionRequirement, found: Sequence[fleet.Candidate], *, loads: Loads, subject: str,
         policy: scoring.Policy, incompatible: bool = False, scored: int | None = None) -> list[Ranked]:
    """Filter and score: each candidate's resource fit (over ``loads``), every one with room now ordered by
    its total (highest first; totals equal to ``scoring.TOTAL_DIGITS`` decimals by the tie key of subject
    and Grove), then the others in sampling order. The total and columns come from ``judging.judged`` (the
    numbers ``scoring.score`` gives, to the bit); the ``Score`` and its JSON are built for the first
    ``scored`` with room (all of them by default: a batch's per-subject call needs only the chosen and the
    runner-up). A batch's ``loads.memo`` keeps each Grove's fit, total, columns and (once built) score until
    the batch places on it. ``incompatible`` (the shadow-mode fallback) checks the rules too and puts the
    fewest incompatibilities first."""
    free_of, claimed_of, group_of, versions = loads.free, loads.claimed, loads.group, loads.versions
    memo = loads.memo
    if memo is None:
        needs, table = admission.Needs.of(requirement), None
    else:
        # The requirement's needs and memo table, by the object's identity (a batch's subjects share a few
        # parsed requirements; building and hashing ``Needs`` per subject cost more than the lookup).
        held = memo.get((id(requirement), id(policy)))
        if held is not None and held[0] is requirement and held[1] is policy:
            needs, table = held[2], held[3]
        else:
            needs = admission.Needs.of(requirement)
            table = memo.get((needs, policy))
            if table is None:
                table = memo[(needs, policy)] = {}
            memo[(id(requirement), id(policy))] = (requirement, policy, needs, table)
    now: list[tuple[float, int, Ranked, list]] = []  # (total, sampling position, row, memo entry)
    rest: list[Ranked] = []
    for candidate in found:
        facts = candidate.facts
        grove_id, platform_rank = facts.id, candidate.platform_rank
        group = group_of.get(grove_id, 0) if group_of else 0
        if table is None:
            entry = judged(needs, facts, free_of.get(grove_id), claimed_of.get(grove_id), group, platform_rank,
                           policy)
        else:
            key = (grove_id, platform_rank, group)
            entry = table.get(key)
            version = versions.get(grove_id, 0) if versions else 0
            if entry is None or entry[0] != version:
                entry = table[key] = judged(needs, facts, free_of.get(grove_id), claimed_of.get(grove_id), group,
                                            platform_rank, policy)
                entry[0] = version
        row = Ranked(facts, platform_rank, candidate.fits_cpu_memory, entry[1], None,
                     checked(requirement, facts) if incompatible else [])
        if entry[2] is not None:
            now.append((entry[2], len(now), row, entry))
        else:
            rest.append(row)
    if len(now) > 1:
        # Highest total first, totals equal to ``scoring.TOTAL_DIGITS`` decimals tied. Rounding keeps the order
        # (it is monotonic), so sorting the exact totals puts each tie together, and ``scoring.tied`` rounds
        # only the close ones.
        now.sort(key=_BY_TOTAL, reverse=True)
        start = 0
        while start < len(now):  # a tie: by the stable hash of (subject, Grove), then the sampling order
            end = start + 1
            while end < len(now) and scoring.tied(now[start][0], now[end][0]):
                end += 1
            if end - start > 1:
                now[start:end] = _tie_sorted(now[start:end], subject)
            start = end
    for _total, _position, row, entry in now[:len(now) if scored is None else scored]:
        if entry[4] is None:  # the score and its JSON, built once per entry (a memo entry: per load version)
            score = scoring.Score(entry[3], entry[2])  # ``scoring.score_of``'s, from what ``judged`` kept
            entry[4] = (score, score.to_json())
        row.score, row._shown = entry[4]
    ranked = [item[2] for item in now] + rest
    if incompatible:
        ranked.sort(key=lambda row: len(row.incompatibilities))
    return ranked


def _tie_sorted(tie: list[tuple[float, int, Ranked, list]], subject: str) -> list:
    """Tied rows by the stable hash of (subject, Grove), equal hashes in sampling order."""
    order = scoring.tie_order(subject)
    return sorted(tie, key=lambda item: (order(item[2].facts.id), item[1]))


def verdict(requirement: ExecutionRequirement, row: Ranked | None, facts: rules.GroveFacts,
             incompatibilities: list[rules.Incompatibility], *, rank: int | None) -> dict:
    verdict = {
        "grove_id": facts.id, "grove_slug": facts.slug, "substrate": facts.substrate,
        "eligible": not incompatibilities, "rank": rank,
        "platform": rules.selected_platform(requirement, facts) if not incompatibilities else None,
        "incompatibilities": [{"code": item.code, "message": item.message} for item in incompatibilities],
    }
    if row is None:
        return verdict
    fit = row.fit
    verdict["fits_cpu_memory"] = row.fits_cpu_memory
    verdict["fit"] = fit.to_json()
    verdict["score"] = row.score_json()
    if requirement.accelerators is not None:
        verdict["fits_accelerators"] = fit.now
        verdict["accelerator_reasons"] = [refusal.to_json() for refusal in fit.reasons]
        if fit.admission is not None and fit.admission.admitted:
            verdict["accelerator_mode"] = fit.admission.label
    return verdict


def scores_of(chosen: Ranked, runner_up: Ranked | None, policy: scoring.Policy) -> dict:
    """What a stored decision keeps of "why here": the policy and weights, the chosen Grove's and the
    runner-up's every plugin column and total, and the sentence."""
    def entry(row: Ranked) -> dict:
        return {"grove_id": row.facts.id, "grove_slug": row.facts.slug, **row.score_json()}

    runner = runner_up if runner_up is not None and runner_up.score is not None else None
    return {**policy.to_json(), "chosen": entry(chosen), "runner_up": entry(runner) if runner else None,
            "why": scoring.why(chosen.facts.slug, chosen.score, runner.facts.slug if runner else None,
                               runner.score if runner else None, policy)}


_NOW_ONLY, _NOW_OR_LATER = frozenset({FitState.NOW}), frozenset({FitState.NOW, FitState.LATER})


def _admit(decision: Decision, ranked: list[Ranked], requirement: ExecutionRequirement, *,
           admit_now: bool) -> Decision:
    """The chosen Grove: the first ranked one with room now (with ``admit_now`` off, one it fits later will do:
    a pin checked before the run starts); else wait for every Grove it could fit later; else refuse, saying by
    how much it never fits."""
    usable = _NOW_ONLY if admit_now else _NOW_OR_LATER
    chosen = next((row for row in ranked if row.fit.state in usable), None)
    if chosen is not None:
        decision.grove, decision.fit = chosen.facts, chosen.fit
        decision.selected_platform = rules.platform_at(chosen.facts.platforms, chosen.platform_rank)
        if chosen.score is not None and decision.policy is not None:
            runner = next((row for row in ranked if row is not chosen and row.score is not None), None)
            decision.scores = scores_of(chosen, runner, decision.policy)
        return decision
    decision.grove, decision.selected_platform = None, ""
    extra = {"candidates": decision.candidates, "summary": decision.summary}
    later = [row for row in ranked if row.fit.state == FitState.LATER]
    if later:
        decision.outcome = Outcome.WAITING
        decision.refusal = WaitingForCapacity(
            "Waiting for capacity: " + " ".join(row.fit.message for row in later[:3]),
            groves=[row.facts.id for row in later], extra=extra)
        return decision
    decision.outcome = Outcome.REFUSED
    decision.refusal = Conflict(ranked[0].fit.code, "No eligible Grove can ever hold this work: "
                                + " ".join(row.fit.message for row in ranked[:3]), extra=extra)
    return decision


def target_facts(reference: str) -> rules.GroveFacts | None:
    """An explicit target's facts, read from the database now (built as the snapshot builds them)."""
    found = snapshot.load_facts(selectors.groves_by_reference(reference))
    return found[0] if found else None


def _explicit(requirement: ExecutionRequirement, reference: str, *, enforced: bool, admit_now: bool,
              loads: Loads, subject: str, policy: scoring.Policy) -> Decision:
    facts = target_facts(reference)
    if facts is None:
        raise NotFound("grove_not_found", f"No Grove with id or slug '{reference}'.", field="target.grove_id")
    if not facts.enabled:
        raise Conflict("grove_disabled", f"Grove {facts.slug} is disabled; enable it or choose another target.",
                       field="target.grove_id")
    found = rules.check(requirement, facts)
    candidate = fleet.Candidate(facts, True, rules.platform_rank(facts.platforms, requirement.compatibility.platform
                                                                 .allowed),
                                facts.fits(requirement.resources.cpu_milli, requirement.resources.memory_bytes))
    ranked = rank(requirement, [candidate], loads=loads, subject=subject, policy=policy)
    only = verdict(requirement, ranked[0], facts, found, rank=1 if not found else None)
    only["stale"] = facts.stale(snapshot.stale_cutoff())
    decision = Decision(
        grove=facts, selected_platform=rules.selected_platform(requirement, facts), chooser=Chooser.EXPLICIT,
        enforced=enforced, incompatibilities=[item.to_json() for item in found], candidates=[only],
        summary=rules.summarise([only]), eligible_total=0 if found else 1, ineligible_total=1 if found else 0,
        ranked=ranked, policy=policy)
    if found and enforced:
        decision.refusal = Conflict(
            "placement_refused",
            f"Grove {facts.slug} cannot run this work: " + " ".join(item.message for item in found),
            extra={"incompatibilities": decision.incompatibilities, "candidates": decision.candidates})
        decision.grove, decision.selected_platform = None, ""
        return decision
    return _admit(decision, ranked, requirement, admit_now=admit_now)


def _selection(requirement: ExecutionRequirement, *, fleet_view: Fleet, enforced: bool, admit_now: bool,
               loads: Loads, subject: str, policy: scoring.Policy, explain: bool) -> Decision:
    # Spread samples round the ring from the subject's point (each subject its own Groves: even spread);
    # bin-pack from one fixed point (every subject the same Groves, fullest first: they fill in order).
    start = scoring.ring_point(subject if policy.name == scoring.SPREAD else "")
    for limit in (CANDIDATE_LIMIT, *WIDER):
        found = fleet_view(requirement, limit=limit, start=start, with_others=explain)
        ranked = rank(requirement, found.eligible, loads=loads, subject=subject, policy=policy,
                      scored=None if explain else 2)
        # The sample is judged on CPU and memory; when none of a full sample has room now (its accelerators
        # are all taken), look further before waiting: a Grove past the sample may have them free.
        # (``rank`` puts every row with room now first.)
        if len(found.eligible) < limit or (ranked and ranked[0].fit.now):
            break
    verdicts, summary = [], ""
    if explain:
        verdicts = [verdict(requirement, row, row.facts, [], rank=position)
                    for position, row in enumerate(ranked, start=1)]
        verdicts += [verdict(requirement, None, candidate.facts, checked(requirement, candidate.facts), rank=None)
                     for candidate in found.others]
        plus = "+" if found.capped else ""
        summary = (f"{found.eligible_total}{plus}/{found.eligible_total + found.ineligible_total}{plus} fresh Groves "
                   "eligible" + (f"; sample of the others: {rules.summarise(verdicts[len(ranked):]).split(': ', 1)[-1]}"
                                 if found.others else ""))
    decision = Decision(grove=None, selected_platform="", chooser=Chooser.SELECTION, enforced=enforced,
                        incompatibilities=[], candidates=verdicts, summary=summary,
                        eligible_total=found.eligible_total, ineligible_total=found.ineligible_total,
                        ranked=ranked, policy=policy)
    if ranked:
        return _admit(decision, ranked, requirement, admit_now=admit_now)
    holders = fleet_view(requirement, limit=CANDIDATE_LIMIT, role_only=True, start=start).eligible
    if not holders:
        decision.refusal = Conflict(
            "no_eligible_grove",
            f"No fresh, enabled Grove holds the {requirement.family} role; enroll one or wait for one to report.",
            extra={"candidates": verdicts, "summary": summary})
        return decision
    fallback = rank(requirement, holders, loads=loads, subject=subject, policy=policy, incompatible=True)
    closest = fallback[0]
    decision.incompatibilities = [item.to_json() for item in closest.incompatibilities]
    if enforced:
        decision.refusal = Conflict(
            "placement_refused",
            f"No fresh Grove can run this work ({summary}); the closest, {closest.facts.slug}: "
            + " ".join(item.message for item in closest.incompatibilities),
            extra={"incompatibilities": decision.incompatibilities, "candidates": verdicts, "summary": summary})
        return decision
    decision.chooser = Chooser.FALLBACK
    decision = _admit(decision, fallback, requirement, admit_now=admit_now)
    if decision.grove is not None:  # the incompatibilities recorded are the chosen Grove's own
        decision.incompatibilities = next([item.to_json() for item in row.incompatibilities]
                                          for row in fallback if row.facts.id == decision.grove.id)
    return decision


def decide(requirement: ExecutionRequirement, *, fleet_view: Fleet | None = None, loads: Loads = NO_LOADS,
           subject: str = "", target: str | None = None, enforced: bool = False, admit_now: bool = True,
           explain: bool = True, policy: scoring.Policy | None = None) -> Decision:
    """Choose a Grove for ``requirement`` and say why (see the module docstring). A refusal (or
    ``WaitingForCapacity``) is returned in ``decision.refusal``, not raised; ``decision.outcome`` says
    placed, waiting or refused. ``subject`` ("type:id") places the sampling ring and breaks ties: a preview
    given the subject decides exactly what its dispatch will. ``explain`` off (a batch's per-subject call)
    skips the verdict dicts; the ranking, the choice and the scores are the same. ``policy``: what
    ``policy_for(requirement)`` answers, when the caller has it already (a batch, from the requirement's
    shared decision).

    An explicit target (argument, else ``requirement.target``) is checked like any other Grove: a target
    never waives compatibility."""
    if policy is None:
        policy = policy_for(requirement)
    reference = target or (requirement.target.grove_id if requirement.target else None)
    if reference:
        decision = _explicit(requirement, reference, enforced=enforced, admit_now=admit_now, loads=loads,
                             subject=subject, policy=policy)
    else:
        decision = _selection(requirement, fleet_view=fleet_view or snapshot.candidates, enforced=enforced,
                              admit_now=admit_now, loads=loads, subject=subject, policy=policy, explain=explain)
    if decision.refusal is not None and decision.outcome == Outcome.PLACED:
        decision.outcome = Outcome.REFUSED
    if decision.refusal is not None and explain:
        decision.refusal.decision = decision.to_json()  # what a stored refusal keeps (never in the API body)
    return decision
