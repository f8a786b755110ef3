import uuid

from django.db import models

from apps.workloads.choices import GenerationState, SecretsMode
from apps.workloads.vocabulary import MAX_STOP_GRACE_S, MIN_STOP_GRACE_S


class NativeWorkload(models.Model):
    """What should run on a native Grove: a signed bundle, its command, ports, probes and secrets."""

    slug = models.SlugField(max_length=100, unique=True)
    environment = models.CharField(max_length=100, default="default")
    team = models.CharField(max_length=100, blank=True, default="")
    bundle = models.ForeignKey("artifacts.Artifact", on_delete=models.PROTECT, related_name="+")
    command = models.JSONField()
    env = models.JSONField(default=dict, blank=True)
    secret_refs = models.JSONField(default=list, blank=True, help_text="names of WorkloadSecrets")
    secrets_mode = models.CharField(max_length=10, choices=SecretsMode.choices, default=SecretsMode.ENV)
    ports = models.JSONField(default=list, blank=True)
    probes = models.JSONField(default=dict, blank=True)
    ingress = models.JSONField(null=True, blank=True)
    restart = models.JSONField(default=dict, blank=True)
    platform = models.JSONField(default=list, blank=True, help_text="acceptable platforms (empty: any)")
    resources = models.JSONField(default=dict, blank=True)
    grove = models.ForeignKey("groves.Grove", null=True, blank=True, on_delete=models.PROTECT, related_name="+",
                              help_text="explicit pin; otherwise placement chooses")
    stop_grace_s = models.PositiveIntegerField(
        null=True, blank=True, help_text="SIGTERM-to-SIGKILL grace when its agent stops it (empty: the agent's)")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]
        constraints = [models.CheckConstraint(
            condition=models.Q(stop_grace_s__gte=MIN_STOP_GRACE_S, stop_grace_s__lte=MAX_STOP_GRACE_S),
            name="native_workload_stop_grace_bounded")]

    def __str__(self) -> str:
        return self.slug


class WorkloadSecret(models.Model):
    """A team's secret value, encrypted at rest (Fernet), delivered only inside a generation of one of that
    team's workloads to its agent. ``team`` "" is a team-less row (written by a staff admin, or before
    secrets had a team): only team-less workloads read it (docs/decisions.md, issue 33)."""

    team = models.CharField(max_length=100, blank=True, default="")
    environment = models.CharField(max_length=100, default="default")
    name = models.CharField(max_length=100)
    ciphertext = models.BinaryField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team", "environment", "name"]
        constraints = [models.UniqueConstraint(fields=["team", "environment", "name"],
                                               name="workload_secret_team_unique")]

    def __str__(self) -> str:
        return f"{self.team or '(no team)'}:{self.environment}/{self.name}"


class WorkloadGeneration(models.Model):
    """One immutable desired state of a workload, and what its agent last reported about it."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workload = models.ForeignKey(NativeWorkload, on_delete=models.CASCADE, related_name="generations")
    number = models.PositiveIntegerField()
    grove = models.ForeignKey("groves.Grove", on_delete=models.PROTECT, related_name="workload_generations")
    # The compiled spec without secret values; ``spec_digest`` also covers the secret values.
    spec = models.JSONField()
    spec_digest = models.CharField(max_length=64)
    state = models.CharField(max_length=20, choices=GenerationState.choices, default=GenerationState.PENDING)
    live = models.BooleanField(default=False)
    restarts = models.PositiveIntegerField(default=0)
    probes = models.JSONField(default=dict, blank=True)
    reason = models.CharField(max_length=100, blank=True, default="")
    message = models.TextField(blank=True, default="")
    log_tail = models.JSONField(default=list, blank=True)
    observed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["workload", "-number"]
        constraints = [models.UniqueConstraint(fields=["workload", "number"], name="workload_generation_unique")]
        indexes = [models.Index(fields=["grove", "state"])]

    def __str__(self) -> str:
        return f"{self.workload.slug}#{self.number}"


class IngressHostname(models.Model):
    """A public host name a native workload claims for ingress: one workload per name (the unique
    constraint is the last word when two applies race; the service answers ``409 ingress_host_taken``)."""

    hostname = models.CharField(max_length=253, unique=True)
    workload = models.ForeignKey(NativeWorkload, on_delete=models.CASCADE, related_name="ingress_hostnames")

    class Meta:
        ordering = ["hostname"]

    def __str__(self) -> str:
        return self.hostname
