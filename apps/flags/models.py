from django.conf import settings
from django.db import models

from apps.flags.choices import FlagScope


class Flag(models.Model):
    """A row per declared flag, kept in step with ``registry.FLAGS`` so admin can list and link them.

    The code declaration is the truth for name, default and description; this row is a mirror.
    """

    name = models.CharField(max_length=100, primary_key=True)
    default = models.BooleanField()
    stage = models.CharField(max_length=20)
    description = models.TextField()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class FlagOverride(models.Model):
    flag = models.ForeignKey(Flag, on_delete=models.CASCADE, related_name="overrides")
    scope = models.CharField(max_length=20, choices=FlagScope.choices, default=FlagScope.GLOBAL)
    # The environment id or team slug; empty for a global override.
    scope_value = models.CharField(max_length=100, blank=True, default="")
    enabled = models.BooleanField()
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["flag_id", "scope", "scope_value"]
        constraints = [
            models.UniqueConstraint(fields=["flag", "scope", "scope_value"], name="flag_override_unique_scope"),
            models.CheckConstraint(
                condition=models.Q(scope="global", scope_value="")
                | (~models.Q(scope="global") & ~models.Q(scope_value="")),
                name="flag_override_scope_value_matches_scope",
            ),
        ]

    def __str__(self) -> str:
        where = self.scope if self.scope == FlagScope.GLOBAL else f"{self.scope}={self.scope_value}"
        return f"{self.flag_id} [{where}] = {'on' if self.enabled else 'off'}"


class FlagAudit(models.Model):
    """One row per change: who, when, old → new (None = no override, i.e. the default), and why."""

    flag = models.ForeignKey(Flag, on_delete=models.CASCADE, related_name="audit")
    scope = models.CharField(max_length=20, choices=FlagScope.choices)
    scope_value = models.CharField(max_length=100, blank=True, default="")
    old_value = models.BooleanField(null=True)
    new_value = models.BooleanField(null=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Who acted when there is no user (a script, `manage.py flags`): kept even if the user is deleted.
    actor_label = models.CharField(max_length=150)
    reason = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.flag_id}: {self.old_value} → {self.new_value} by {self.actor_label}"
