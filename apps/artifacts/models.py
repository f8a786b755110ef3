from django.db import models

from apps.artifacts.choices import StorageKind


class Artifact(models.Model):
    """A digest and where its bytes can be fetched. A digest is not a container: consumers that need an
    image reference must require ``storage_kind == oci_registry``."""

    digest = models.CharField(max_length=71, db_index=True, help_text="sha256:<64 hex>")
    storage_kind = models.CharField(max_length=20, choices=StorageKind.choices)
    reference = models.CharField(max_length=500, help_text="image ref, package, or object key")
    media_type = models.CharField(max_length=200, blank=True, default="")
    size = models.BigIntegerField(null=True, blank=True)
    platform = models.CharField(max_length=50, blank=True, default="", help_text="from the image config when readable")
    # Detached Ed25519 signature (base64) over the digest string, made by the release pipeline's key.
    signature = models.TextField(blank=True, default="")
    signing_key_id = models.CharField(max_length=100, blank=True, default="")
    producing_run_id = models.CharField(max_length=64, blank=True, default="")
    producing_node = models.CharField(max_length=100, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["digest", "storage_kind", "reference"], name="artifact_unique_location")
        ]

    def __str__(self) -> str:
        return f"{self.storage_kind}:{self.reference}"
