"""Reads for placement: a Grove by reference, stored placements and their explained decisions.

The in-process fleet snapshot the chooser decides from lives in ``apps.placement.snapshot``.
"""
from __future__ import annotations

import uuid

from django.db.models import Count, QuerySet

from apps.groves.models import Grove
from apps.placement import outcome
from apps.placement.choices import Outcome
from apps.placement.models import ExecutionPlacement, PlacementVerdicts

# Every Grove column placement reads (``snapshot.grove_facts`` turns a row of them into ``GroveFacts``).
FACT_FIELDS = ("id", "slug", "substrate", "roles", "platforms", "isolation_modes", "change_kinds", "enabled",
               "last_heartbeat_at", "capacity_reported_at", "last_polled_at", "placement_preference")


def groves_by_reference(reference: str) -> QuerySet[Grove]:
    """The Grove (at most one) with this id or slug (an explicit pin may use either)."""
    try:
        return Grove.objects.filter(pk=uuid.UUID(str(reference)))
    except ValueError:
        return Grove.objects.filter(slug=reference)


def grove_by_reference(reference: str) -> Grove | None:
    """A Grove by id or slug, with the columns placement reads."""
    return groves_by_reference(reference).only(*FACT_FIELDS).first()


def placement_for_subject(*, subject_type: str, subject_id: str) -> ExecutionPlacement | None:
    """The subject's *placement* (a retry re-reads it); a stored refusal or wait is never one."""
    return (ExecutionPlacement.objects.select_related("grove")
            .filter(subject_type=subject_type, subject_id=subject_id, outcome=Outcome.PLACED).first())


def group_counts(group: str) -> dict[str, int]:
    """How many placements of this spread group each Grove holds (the run-spread plugin's load)."""
    rows = (ExecutionPlacement.objects.filter(spread_group=group, outcome=Outcome.PLACED, grove__isnull=False)
            .values_list("grove_id").annotate(n=Count("id")))
    return {str(grove_id): n for grove_id, n in rows}


def placement_list() -> QuerySet[ExecutionPlacement]:
    return ExecutionPlacement.objects.all().order_by("-created_at", "-id")


def shared_verdicts(placements) -> dict[str, dict]:
    """The shared verdict bodies of a page of placements, by key, in one query (``placement_decision``'s
    ``shared`` cache filled up front, so a page costs one query whatever number of keys it holds)."""
    keys = {placement.verdicts_key for placement in placements if placement.verdicts_key}
    return dict(PlacementVerdicts.objects.filter(key__in=keys).values_list("key", "body")) if keys else {}


def placement_decision(placement: ExecutionPlacement, *, shared: dict[str, dict] | None = None) -> dict:
    """The placement's decision with every verdict, as ``explain`` shows it: a single placement's decision as
    stored; a batch placement's compact decision joined to its shared verdicts (``PlacementVerdicts``),
    its own top candidates first (with the rank, fit and unit it was given), then the shared ones.
    ``shared`` is a cache of verdict bodies by key (a page of placements reads each key once)."""
    decision = placement.decision
    key = placement.verdicts_key
    if not key:
        return decision
    if shared is None or key not in shared:
        row = PlacementVerdicts.objects.filter(key=key).values_list("body", flat=True).first()
        body = row or {}
        if shared is not None:
            shared[key] = body
    else:
        body = shared[key]
    verdicts = body.get("candidates", [])
    by_id = {verdict["grove_id"]: verdict for verdict in verdicts}
    own = [{**by_id.get(top["grove_id"], {}), **top, "eligible": True, "incompatibilities": []}
           for top in decision.get("top", [])]
    seen = {verdict["grove_id"] for verdict in own}
    rest, rank = [], len(own)
    for verdict in verdicts:
        if verdict["grove_id"] in seen:
            continue
        if verdict.get("eligible"):
            rank += 1
            verdict = {**verdict, "rank": rank}
        rest.append(verdict)
    return {**decision, **_scores_from_top(decision), "candidates": own + rest,
            "shared_summary": body.get("summary", "")}


def _scores_from_top(decision: dict) -> dict:
    """A compact decision's "why here" with the chosen Grove's and the runner-up's columns put back from its
    first two ``top`` candidates (``batch._compact_scores`` left them out); {} when stored whole."""
    scores, top = decision.get("scores"), decision.get("top") or []
    if not scores or "chosen" in scores or not top:
        return {}

    def entry(candidate: dict) -> dict:
        return {"grove_id": candidate["grove_id"], "grove_slug": candidate["grove_slug"], **candidate["score"]}

    return {"scores": {**scores, "chosen": entry(top[0]), "runner_up": entry(top[1]) if len(top) > 1 else None}}


def placement_outcome(placement: ExecutionPlacement) -> outcome.Rendered:
    """The stored decision's outcome as every surface shows it (``apps.placement.outcome``). Reads the row's
    ``incompatibilities`` annotation when the list selected only that part of the decision."""
    found = getattr(placement, "incompatibilities", None)
    if found is None:
        found = (placement.decision or {}).get("incompatibilities", [])
    return outcome.render(outcome=placement.outcome, would_refuse=placement.would_refuse,
                          grove_slug=placement.grove_slug, grove_gone=placement.grove_id is None,
                          code=placement.code, incompatibilities=[item.get("code", "") for item in found or []])
