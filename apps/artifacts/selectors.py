"""Reads for artifacts: the filtered list behind the API."""
from __future__ import annotations

import uuid

from django.db.models import QuerySet

from apps.artifacts.models import Artifact
from apps.core.errors import NotFound
from apps.groves.models import Grove


def artifact_list() -> QuerySet[Artifact]:
    return Artifact.objects.select_related("uploaded_by").order_by("-created_at", "-id")


def grove_by_id_or_slug(reference: str) -> Grove:
    """The destination Grove named by id or slug, or ``404 grove_not_found``."""
    try:
        grove = Grove.objects.filter(pk=uuid.UUID(str(reference))).first()
    except ValueError:
        grove = Grove.objects.filter(slug=reference).first()
    if grove is None:
        raise NotFound("grove_not_found", f"No Grove '{reference}'.", field="grove")
    return grove
