"""The node and run transition functions (``states.NODE``/``states.RUN``): the only writers of their status."""
from __future__ import annotations

import logging

from django.utils import timezone

from apps.core.lifecycle import TransitionEvent
from apps.pipelines.models import PipelineNode, PipelineNodeEvent, PipelineNodeWait, PipelineRun
from apps.pipelines.states import NODE, NODE_TERMINAL, RUN
from apps.pipelines.vocabulary import NodeStatus

# A node between these two states may hold a place in the admission queue (admitted, not yet dispatched).
_IN_QUEUE = frozenset({NodeStatus.QUEUED, NodeStatus.WAITING})

log = logging.getLogger(__name__)


def record_node_event(event: TransitionEvent) -> None:
    """``NODE`` listener (wired in ``apps.pipelines.wiring``): every node transition leaves an event row."""
    PipelineNodeEvent.objects.create(node=event.subject, from_status=event.old, to_status=event.new,
                                     reason=event.reason)


def node_transition(*, node: PipelineNode, to: str, reason: str = "", detail: str = "",
                    changes: dict | None = None) -> PipelineNode:
    """The only way a node changes status: checks the allowed from-states and records an event
    (``changes``: other fields saved in the same UPDATE)."""
    changes = dict(changes or {})
    if reason:
        changes.update(reason=reason, detail=detail[:2000])
    if to in NODE_TERMINAL:
        changes["awaiting_job_id"] = None
    leaves_queue = node.status in _IN_QUEUE and to not in _IN_QUEUE
    NODE.apply(node, to, reason=reason, now=timezone.now(), changes=changes)
    if leaves_queue:  # dispatched or ended: its place in the admission queue goes with it
        PipelineNodeWait.objects.filter(node=node).delete()
    return node


def run_transition(*, run: PipelineRun, to: str, reason: str = "") -> PipelineRun:
    RUN.apply(run, to, reason=reason, now=timezone.now(), changes={"reason": reason} if reason else {})
    log.info("pipeline run %s", to, extra={"run": str(run.id), "reason": reason})
    return run
