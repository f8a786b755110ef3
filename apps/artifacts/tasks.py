"""Celery tasks for artifacts (thin: they call services)."""
from __future__ import annotations

from celery import shared_task

from apps.artifacts.services import artifact_gc


@shared_task(name="artifacts.gc")
def gc() -> dict:
    """Hourly (beat): remove unreferenced CAS blobs past the grace period; skips a missing bucket."""
    return artifact_gc()
