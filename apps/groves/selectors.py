"""Reads for Groves."""
from __future__ import annotations

from django.db.models import QuerySet

from apps.groves.models import Grove


def grove_list() -> QuerySet[Grove]:
    return Grove.objects.prefetch_related("placement_units", "accelerators").order_by("slug")
