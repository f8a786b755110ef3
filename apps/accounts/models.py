"""Teams, API tokens (stored hashed) and the audit trail."""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from apps.accounts.choices import AuditVia


class Team(models.Model):
    """A team owns work. Its slug is the ``team`` string carried by compute jobs, pipeline runs, native
    workloads, placements, accelerator entitlements and flag overrides."""

    slug = models.SlugField(max_length=100, unique=True)
    name = models.CharField(max_length=200, blank=True, default="")
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="forest_teams", blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]
        permissions = [("act_for_any_team", "Can see and act on every team's work")]

    def __str__(self) -> str:
        return self.slug


class ApiToken(models.Model):
    """A named, expiring, revocable API token of one user. Only the SHA-256 of its secret is stored;
    the full value (``fat_<key id>.<secret>``) is shown once, when it is made."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, help_text="which client holds it, e.g. 'ci-main' or 'alice-laptop'")
    key_id = models.CharField(max_length=32, unique=True)
    secret_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_reason = models.CharField(max_length=200, blank=True, default="")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["user", "name"], condition=models.Q(revoked_at__isnull=True),
                                    name="api_token_live_name_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.key_id}) of {self.user_id}"

    @property
    def live(self) -> bool:
        return self.revoked_at is None and self.expires_at > timezone.now()


class AuditEvent(models.Model):
    """One staff write: who, through what, on which object, for which team, with the request id."""

    at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="+")
    # The username at the time (kept when the user is deleted), or the OS user behind a command.
    actor_label = models.CharField(max_length=150)
    token = models.ForeignKey(ApiToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    via = models.CharField(max_length=10, choices=AuditVia.choices)
    action = models.CharField(max_length=80, db_index=True)
    target_type = models.CharField(max_length=80, blank=True, default="")
    target_id = models.CharField(max_length=200, blank=True, default="")
    team = models.CharField(max_length=100, blank=True, default="", db_index=True)
    request_id = models.CharField(max_length=128, blank=True, default="", db_index=True)
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["target_type", "target_id"])]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_label} {self.action} {self.target_type}:{self.target_id}"
