"""Core's Celery task: the liveness probe beat sends to the worker queue and the runner queue."""
from __future__ import annotations

from datetime import UTC, datetime

from celery import shared_task
from django.utils import timezone

from apps.core.liveness import ProcessRole
from apps.core.services import process_heartbeat_record


# acks_late off: a probe that died with its worker is not worth redelivering; the next one comes in seconds.
@shared_task(name="core.liveness_probe", bind=True, ignore_result=True, acks_late=False)
def liveness_probe(self, role: str, sent_at: float | None = None) -> None:
    """Consumed from ``role``'s queue: that node consumed now; beat sent this at ``sent_at``."""
    process_heartbeat_record(role=ProcessRole(role), node=self.request.hostname or "unknown", at=timezone.now())
    if sent_at is not None:
        # Exactly one beat per deployment (docs/deploy.md), so one row.
        process_heartbeat_record(role=ProcessRole.BEAT, node="beat",
                                 at=datetime.fromtimestamp(sent_at, UTC))
