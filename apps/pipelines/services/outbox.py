"""Handing pipeline tasks to the broker after commit; a lost send is the sweep's to repeat."""
from __future__ import annotations

import logging
from functools import partial

from django.conf import settings
from django.db import transaction

log = logging.getLogger(__name__)


def resume_resend_after_s() -> float:
    """How long an outbox row may stay undone before the sweep re-sends it (the broker may have lost it)."""
    return settings.PIPELINE_RESUME_RESEND_AFTER_S


def _send(task_name: str, *args, countdown: float | None = None) -> None:
    """Hand a task to the broker; a failure is logged and left to the sweep (the database holds the truth)."""
    from apps.pipelines import tasks  # tasks import these services: resolved at call time

    try:
        getattr(tasks, task_name).apply_async(args=args, countdown=countdown or None)
    except Exception as exc:
        log.warning("task not sent; the sweep will re-send it", extra={"task": task_name, "error": str(exc)})


def send_after_commit(task_name: str, *args, countdown: float | None = None) -> None:
    """Send once the transaction commits; ``countdown`` (s) delays delivery (a retry's backoff)."""
    transaction.on_commit(partial(_send, task_name, *args, countdown=countdown))


def send_to_runner(node_id: int) -> None:
    """Hand an in-place wait to the runner pool. Losing it loses nothing: the job's terminal report writes
    the node's resume row either way and the sweep times out an overdue job; only the slot goes unheld."""
    from apps.pipelines import tasks  # as in _send

    try:
        tasks.node_wait_in_place.apply_async(args=(node_id,), queue=settings.PIPELINE_RUNNER_QUEUE)
    except Exception as exc:
        log.warning("in-place wait not sent; the node resumes from its outbox row",
                    extra={"node": node_id, "error": str(exc)})
