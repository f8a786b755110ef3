"""Runs: create (validate, plan, seed), advance (queue, skip, finish) and cancel.

Lock order, everywhere a node changes: the run row first, then node rows, then job rows. Row locks are
``FOR NO KEY UPDATE`` (we never change a key): plain ``FOR UPDATE`` would also block the foreign-key
checks (``FOR KEY SHARE``) that PostgreSQL runs at COMMIT for rows referencing the locked one, which
makes a report's commit wait on a run lock and can deadlock against cancellation.
"""
from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from apps.accounts.selectors import authorize
from apps.core.errors import ForestError, NotFound
from apps.dispatch.models import GroveJob
from apps.dispatch.services import job_end_by_host
from apps.dispatch.states import JOB_LIVE
from apps.dispatch.vocabulary import JobStatus
from apps.pipelines import bodies, rules
from apps.pipelines.models import PipelineGraph, PipelineNode, PipelineNodeEvent, PipelineOutbox, PipelineRun
from apps.pipelines.selectors import run_get
from apps.pipelines.services.inputs import graph_inputs_resolve, run_inputs_record
from apps.pipelines.services.outbox import send_after_commit
from apps.pipelines.services.planning import dedup_source, pipeline_plan
from apps.pipelines.services.transitions import node_transition, run_transition
from apps.pipelines.states import NODE_TERMINAL, RUN_TERMINAL, run_outcome
from apps.pipelines.vocabulary import NodeStatus, RunStatus, Task
from apps.placement.batch import BatchItem, place_batch
from apps.placement.requirements import ExecutionRequirement
from apps.placement.services import placement_pin
from apps.placement.vocabulary import MAX_BATCH_SIZE


@transaction.atomic
def pipeline_run_create(*, kind: str, graph: dict | None = None, canonical: dict | None = None,
                        environment: str = "", team: str = "", build_id: str | None = None, created_by=None,
                        node_fields: dict[str, str] | None = None) -> PipelineRun:
    """Validate, resolve inputs, plan and seed a run; nodes whose needs are met are queued for the exec
    driver. Inputs are resolved before the graph is digested: the work's identity holds their digests.
    ``graph`` is a body to parse; ``canonical`` a graph already parsed (``bodies.run_request``'s, a compute
    request's), which is not parsed again."""
    if canonical is None:
        canonical = bodies.graph_parse(graph)
    canonical = graph_inputs_resolve(canonical=canonical, user=created_by, team=team, node_fields=node_fields)
    planned = pipeline_plan(canonical=canonical, run_kind=kind, environment=environment, team=team)
    digest = rules.graph_digest(canonical)
    graph_row, _ = PipelineGraph.objects.get_or_create(digest=digest, defaults={"canonical": canonical})
    run = PipelineRun.objects.create(graph=graph_row, kind=kind, environment=environment, team=team,
                                     build_id=build_id or None,
                                     created_by=created_by if getattr(created_by, "pk", None) else None)
    run_inputs_record(run=run, canonical=canonical)
    now = timezone.now()
    for item in planned:
        node = item.node
        source, decision = dedup_source(node, item.digest)
        fields = dict(
            run=run, node_id=node["id"], kind=node["kind"], runtime=node.get("runtime", ""), spec=node,
            node_digest=item.digest, position=item.position, needs=node["needs"], reuse=node["reuse"],
            trust=node["trust"], timeout_s=node["timeout_s"], requirement=item.requirement,
            plan_warnings=item.warnings, dedup_decision=decision,
        )
        if source is not None:
            # Born succeeded (its initial state, not a transition): GRAPH_DEDUP inherited the result.
            row = PipelineNode.objects.create(
                **fields, status=NodeStatus.SUCCEEDED, reason="graph_dedup", finished_at=now,
                seeded_from_run_id=source.seeded_from_run_id or source.run_id, exit_code=source.exit_code,
                outputs=source.outputs)
            PipelineNodeEvent.objects.create(node=row, from_status="", to_status=NodeStatus.SUCCEEDED,
                                             reason="graph_dedup")
            continue
        row = PipelineNode.objects.create(**fields)
        if node.get("grove"):
            # An explicit Grove pin is validated and stored as the node's placement before the run starts.
            try:
                placement_pin(subject_type="pipeline_node", subject_id=str(row.pk),
                              requirement=ExecutionRequirement.from_stored(row.requirement), grove=node["grove"],
                              team=run.team or None, environment=run.environment or None)
            except ForestError as exc:
                if exc.field == "target.grove_id":  # placement's name for it; the request said "grove"
                    exc.field = "grove"
                raise
    run_transition(run=run, to=RunStatus.RUNNING)
    run_advance(run)
    return run


def run_and_node_locked(node_id: int) -> tuple[PipelineRun, PipelineNode] | None:
    """The node's run and the node, row-locked in that order (the lock order), or None if it is gone.
    Call inside a transaction."""
    run_id = PipelineNode.objects.filter(pk=node_id).values_list("run_id", flat=True).first()
    if run_id is None:
        return None
    run = PipelineRun.objects.select_for_update(no_key=True).get(pk=run_id)
    return run, PipelineNode.objects.select_for_update(no_key=True).get(pk=node_id)


def run_advance(run: PipelineRun, nodes: list[PipelineNode] | None = None) -> list[str]:
    """Queue nodes whose needs succeeded, skip those whose needs cannot, and finish the run when all
    nodes are terminal. Callers hold the run's row lock (and may pass the run's nodes, in position order,
    when they have just read them)."""
    if run.status in RUN_TERMINAL:
        return []
    if nodes is None:
        nodes = list(run.nodes.order_by("position"))
    status = {n.node_id: n.status for n in nodes}
    queued, ready = [], []
    for node in nodes:  # planner order: a skip cascades in one pass
        if node.status != NodeStatus.PENDING:
            continue
        needs = [status[n] for n in node.needs]
        if any(s in NODE_TERMINAL and s != NodeStatus.SUCCEEDED for s in needs):
            node_transition(node=node, to=NodeStatus.SKIPPED, reason="need_not_succeeded")
        elif all(s == NodeStatus.SUCCEEDED for s in needs):
            node_transition(node=node, to=NodeStatus.QUEUED)
            queued.append(node.node_id)
            ready.append(node)
            send_after_commit(Task.NODE_EXECUTE, node.pk)
        status[node.node_id] = node.status
    if len(ready) > 1:
        _place_ready(run, ready)
    outcome = run_outcome(list(status.values()))
    if outcome is not None:
        run_transition(run=run, to=outcome)
    return queued


def _place_ready(run: PipelineRun, nodes: list[PipelineNode]) -> None:
    """Nodes that became ready together are placed as one batch (one snapshot read, capacity assumed as
    they are placed, one write). ``node_execute`` then re-reads each stored placement as a retry does; a
    node the batch could not place (no room left, refused) is placed by its own ``node_execute`` as before,
    which reports the refusal on the node."""
    for first in range(0, len(nodes), MAX_BATCH_SIZE):
        place_batch([BatchItem(subject_type="pipeline_node", subject_id=str(node.pk),
                               requirement=ExecutionRequirement.from_stored(node.requirement),
                               target=node.spec.get("grove") or None, team=run.team or None,
                               environment=run.environment or None, group=f"run:{run.pk}")
                     for node in nodes[first:first + MAX_BATCH_SIZE]])


def pipeline_run_cancel_as(*, actor, run_id, reason: str = "cancelled") -> PipelineRun:
    """``pipeline_run_cancel`` for a person, from any door (API, staff page, CLI, MCP): the run must exist
    (404 ``run_not_found``), the actor must hold ``pipelines.change_pipelinerun`` and belong to the run's
    team (403 ``permission_required`` / ``team_forbidden``). Checked before anything is locked or written."""
    run = run_get(run_id=run_id)
    authorize(actor, "pipelines.change_pipelinerun", team=run.team, what="this run")
    return pipeline_run_cancel(run_id=run.id, reason=reason)


def pipeline_run_cancel(*, run_id, reason: str = "cancelled") -> PipelineRun:
    """Cancel a run: its nodes end cancelled, its own live Grove jobs are cancelled (nodes first, so the
    jobs' end writes no resume), waits are cleared. Idempotent; a finished run is returned unchanged."""
    now = timezone.now()
    with transaction.atomic():
        run = PipelineRun.objects.select_for_update(no_key=True).filter(pk=run_id).first()
        if run is None:
            raise NotFound("run_not_found", f"No pipeline run '{run_id}'.")
        if run.status in RUN_TERMINAL:
            return run
        nodes = list(PipelineNode.objects.select_for_update(no_key=True).filter(run=run)
                     .exclude(status__in=NODE_TERMINAL))
        jobs = list(GroveJob.objects.select_for_update(no_key=True).filter(run_id=run.id, status__in=JOB_LIVE))
        for node in nodes:
            node_transition(node=node, to=NodeStatus.CANCELLED, reason=reason)
        for job in jobs:
            job_end_by_host(job=job, to=JobStatus.CANCELLED, reason=reason, now=now)
        PipelineOutbox.objects.filter(node__run=run, done_at__isnull=True).update(done_at=now)
        run_transition(run=run, to=RunStatus.CANCELLED, reason=reason)
    return run
