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


def _send(task_name: str, *args) -> None:
    """Hand a task to the broker; a failure is logged and left to the sweep (the database holds the truth)."""
    from apps.pipelines import tasks  # tasks import these services: resolved at call time

    try:
        getattr(tasks, task_name).delay(*args)
    except Exception as exc:
        log.warning("task not sent; the sweep will re-send it", extra={"task": task_name, "error": str(exc)})


def send_after_commit(task_name: str, *args) -> None:
    transaction.on_commit(partial(_send, task_name, *args))
