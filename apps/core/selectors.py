"""Core's reads: is each kind of background process alive? Not team data: every staff surface and the
unauthenticated /healthz read the same verdicts (roles and ages, never node names on /healthz)."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db.models import Count, Max
from django.utils import timezone

from apps.core.liveness import ProcessRole, verdict
from apps.core.models import ProcessHeartbeat


@dataclass(frozen=True)
class RoleLiveness:
    role: str
    verdict: str  # live / stale / unknown
    age_s: float | None  # since the newest sign of life of any node of this role
    nodes: int
    last_seen_at: datetime | None


def process_liveness(*, now: datetime | None = None) -> list[RoleLiveness]:
    """One row per role, in ProcessRole's order; ``live`` when some node of the role showed life within
    ``FOREST_LIVENESS_WITHIN_S``."""
    now = now or timezone.now()
    newest = {row["role"]: row for row in ProcessHeartbeat.objects.values("role").annotate(
        last=Max("seen_at"), nodes=Count("id"))}
    rows = []
    for role in ProcessRole:
        row = newest.get(role.value)
        last = row["last"] if row else None
        age = None if last is None else max(0.0, (now - last).total_seconds())
        rows.append(RoleLiveness(role=role.value, verdict=verdict(age, within_s=settings.FOREST_LIVENESS_WITHIN_S),
                                 age_s=age, nodes=row["nodes"] if row else 0, last_seen_at=last))
    return rows
