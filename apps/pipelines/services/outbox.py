"""Handing pipeline tasks to the broker after commit; a lost send is the sweep's to repeat.

Tasks are sent by their registered names (``vocabulary.Task``): ``tasks.py`` calls these services, so the
services never import it (the import contract in pyproject.toml keeps that one direction). ``send_task`` is
what a task's ``apply_async`` calls underneath, with the same routing (the app's default queue unless one is
named); it does not need the tasks module imported in the sending process."""
from __future__ import annotations

import logging
from functools import partial

from celery import current_app
from django.conf import settings
from django.db import transaction

from apps.pipelines.vocabulary import Task

log = logging.getLogger(__name__)


def resume_resend_after_s() -> float:
    """How long an outbox row may stay undone before the sweep re-sends it (the broker may have lost it)."""
    return settings.PIPELINE_RESUME_RESEND_AFTER_S


def _send(task: Task, *args, countdown: float | None = None) -> None:
    """Hand a task to the broker; a failure is logged and left to the sweep (the database holds the truth)."""
    try:
        current_app.send_task(task.value, args=args, countdown=countdown or None)
    except Exception as exc:
        log.warning("task not sent; the sweep will re-send it", extra={"task": task.value, "error": str(exc)})


def send_after_commit(task: Task, *args, countdown: float | None = None) -> None:
    """Send once the transaction commits; ``countdown`` (s) delays delivery (a retry's backoff)."""
    transaction.on_commit(partial(_send, task, *args, countdown=countdown))


def send_to_runner(node_id: int) -> None:
    """Hand an in-place wait to the runner pool. Losing it loses nothing: the job's terminal report writes
    the node's resume row either way and the sweep times out an overdue job; only the slot goes unheld."""
    try:
        current_app.send_task(Task.NODE_WAIT_IN_PLACE.value, args=(node_id,), queue=settings.PIPELINE_RUNNER_QUEUE)
    except Exception as exc:
        log.warning("in-place wait not sent; the node resumes from its outbox row",
                    extra={"node": node_id, "error": str(exc)})
