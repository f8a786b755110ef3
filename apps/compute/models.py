import uuid

from django.conf import settings
from django.db import models


class ComputeJob(models.Model):
    """A submitted compute job: the request as given, and the pipeline run (kind ``compute``) that runs it."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=200)
    environment = models.CharField(max_length=100, blank=True, default="")
    team = models.CharField(max_length=100, blank=True, default="")
    grove_pin = models.CharField(max_length=100, blank=True, default="")
    request = models.JSONField()
    run = models.OneToOneField("pipelines.PipelineRun", on_delete=models.PROTECT, related_name="compute_job")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.id})"
