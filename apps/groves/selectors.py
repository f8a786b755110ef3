"""Reads for Groves."""
from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from apps.groves.models import Grove


def grove_list() -> QuerySet[Grove]:
    return Grove.objects.prefetch_related("placement_units", "accelerators").order_by("slug")


def grove_fresh() -> QuerySet[Grove]:
    """Enabled Groves whose last heartbeat is recent enough to trust their report."""
    cutoff = timezone.now() - timedelta(seconds=settings.GROVE_STALE_AFTER_S)
    return Grove.objects.filter(enabled=True, last_heartbeat_at__gte=cutoff)
