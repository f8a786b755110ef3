"""Core's one table: the newest sign of life of each background process (docs/decisions.md, "Host survives
its broker")."""
from __future__ import annotations

from django.db import models

from apps.core.choices import text_choices
from apps.core.liveness import ProcessRole

ProcessRoleChoices = text_choices(ProcessRole)


class ProcessHeartbeat(models.Model):
    """Written by the ``core.liveness_probe`` task: for a worker or runner node, when it last consumed the probe
    from its queue; for beat, when it sent the probe a worker then consumed."""

    role = models.CharField(max_length=16, choices=ProcessRoleChoices.choices)
    node = models.CharField(max_length=255)
    seen_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["role", "node"], name="core_processheartbeat_role_node")]

    def __str__(self) -> str:
        return f"{self.role} {self.node} at {self.seen_at:%Y-%m-%d %H:%M:%S}"
