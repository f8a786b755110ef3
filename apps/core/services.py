"""Core's writes: the background processes' heartbeats."""
from __future__ import annotations

from datetime import datetime

from apps.core.liveness import ProcessRole
from apps.core.models import ProcessHeartbeat


def process_heartbeat_record(*, role: ProcessRole, node: str, at: datetime) -> None:
    """One upsert; an older stamp never replaces a newer one (probes can be consumed out of order)."""
    row, created = ProcessHeartbeat.objects.get_or_create(role=role, node=node[:255], defaults={"seen_at": at})
    if not created:
        ProcessHeartbeat.objects.filter(pk=row.pk, seen_at__lt=at).update(seen_at=at)
