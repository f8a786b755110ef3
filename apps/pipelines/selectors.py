"""Reads for pipelines: runs with their nodes, refusals and shadow-mode warnings, and the runner pool."""
from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import QuerySet

from apps.core.errors import NotFound
from apps.pipelines.models import PipelineNode, PipelineNodeWait, PipelineNodeWaitGrove, PipelineRun
from apps.pipelines.vocabulary import NodeStatus, WaitMode
from apps.placement.choices import COMPATIBILITY_FLAG, SubjectType
from apps.placement.models import ExecutionPlacement
from apps.placement.outcome import REFUSED, WOULD_REFUSE, outcome_key


def run_list() -> QuerySet[PipelineRun]:
    return PipelineRun.objects.select_related("graph").order_by("-created_at")


def run_get(*, run_id) -> PipelineRun:
    try:
        run = run_list().filter(pk=run_id).first()
    except (ValueError, TypeError, ValidationError):  # a malformed id is a 404, not a 500
        run = None
    if run is None:
        raise NotFound("run_not_found", f"No pipeline run '{run_id}'.")
    return run


def runner_status() -> dict:
    """The runner pool that in-place waits occupy: its queue, its slots (settings) and how many steps wait
    in place now (more than ``slots``: the rest wait for a slot; their jobs run regardless)."""
    waiting = PipelineNode.objects.filter(status=NodeStatus.AWAITING, wait_mode=WaitMode.IN_PLACE).count()
    return {"queue": settings.PIPELINE_RUNNER_QUEUE, "slots": settings.PIPELINE_RUNNER_SLOTS,
            "waiting_in_place": waiting}


def node_refusal(node: PipelineNode) -> dict | None:
    """``{"code", "detail"}`` when the node ended refused before its current attempt ran (placement,
    accelerator admission, a stored Grove gone), else None. A refused attempt has no Grove job of its own:
    the node's job, if any, belongs to an earlier attempt. Reads ``current_job`` (select it related)."""
    if node.status != NodeStatus.FAILED:
        return None
    if node.current_job_id and node.current_job.attempt == node.attempt:
        return None  # the attempt ran; its failure is the job's, told by reason/exit_code/log_tail
    return {"code": node.reason, "detail": node.detail}


def run_warnings(nodes: list[PipelineNode]) -> list[dict]:
    """Shadow mode says so: for each node that would have been refused with enforcement on, its reasons
    as ``{"node", "code", "detail", "flag", "grove"}``. A node placed by a stored decision has that decision's
    own would-refuse codes only, each naming the Grove the work was placed on (``grove``): the plan-time
    reasons were about the Groves the plan looked at, not the one it ran on. A node not placed yet has its
    plan-time never-placeable reasons (``grove`` null). A refused node has its refusal and no warning: it
    was refused, not "would be". One query for all the nodes (and a failed node's job, select it related)."""
    ids = [str(node.pk) for node in nodes]
    decisions = {subject_id: (outcome_key(outcome=outcome, would_refuse=would_refuse), decision)
                 for subject_id, outcome, would_refuse, decision in
                 ExecutionPlacement.objects.filter(subject_type=SubjectType.PIPELINE_NODE, subject_id__in=ids)
                 .values_list("subject_id", "outcome", "would_refuse", "decision")} if ids else {}
    out: list[dict] = []
    for node in nodes:
        stored = decisions.get(str(node.pk))
        key = stored[0] if stored else None
        if node_refusal(node) is not None or key == REFUSED:
            continue
        if stored is not None:
            if key != WOULD_REFUSE:
                continue
            decision = stored[1]
            grove = decision.get("grove_slug")
            items = [item for item in decision.get("incompatibilities", [])
                     if not item.get("grove") or item["grove"] == grove]
        else:
            grove, items = None, node.plan_warnings
        seen: set[str] = set()
        for item in items:
            if item["code"] in seen:
                continue
            seen.add(item["code"])
            out.append({"node": node.node_id, "code": item["code"], "detail": item["message"],
                        "flag": COMPATIBILITY_FLAG, "grove": grove})
    return out


def queue_positions(nodes: list[PipelineNode]) -> dict[int, dict]:
    """For each waiting node: its place in the admission queue — 1 + the entries ahead of it in the line of
    the Grove where it stands earliest (an indexed range count per Grove) — with what it waits on, since
    when, and until when. Only waiting nodes cost a query."""
    waiting = [node.pk for node in nodes if node.status == NodeStatus.WAITING]
    if not waiting:
        return {}
    out: dict[int, dict] = {}
    for wait in PipelineNodeWait.objects.filter(node_id__in=waiting).prefetch_related("groves"):
        slugs = {v.get("grove_id"): v.get("grove_slug") for v in wait.verdicts}
        best = None
        for entry in wait.groves.all():
            ahead = PipelineNodeWaitGrove.objects.filter(grove_id=entry.grove_id, seq__lt=wait.pk,
                                                         wait__admitted_grove_id__isnull=True).count()
            if best is None or ahead < best[0]:
                best = (ahead, str(entry.grove_id))
        out[wait.node_id] = {
            "position": best[0] + 1 if best else None,
            "grove": slugs.get(best[1], best[1]) if best else None,
            "waiting_for": sorted(slugs.get(str(e.grove_id)) or str(e.grove_id) for e in wait.groves.all()),
            "code": wait.code, "detail": wait.detail, "since": wait.since.isoformat(),
            "deadline_at": wait.deadline_at.isoformat(), "verdicts": wait.verdicts,
        }
    return out


def stored_decisions(nodes: list[PipelineNode]) -> dict[int, dict]:
    """The stored decision of each node that has one, placed or not: ``{"id", "outcome", "code", "summary"}``
    (``forest placements explain ID`` shows the rest). One query for all the nodes."""
    ids = [str(node.pk) for node in nodes]
    if not ids:
        return {}
    rows = (ExecutionPlacement.objects.filter(subject_type=SubjectType.PIPELINE_NODE, subject_id__in=ids)
            .values_list("subject_id", "pk", "outcome", "code", "decision"))
    return {int(subject_id): {"id": pk, "outcome": outcome, "code": code, "summary": decision.get("summary", "")}
            for subject_id, pk, outcome, code, decision in rows}
