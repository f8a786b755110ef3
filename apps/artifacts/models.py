from django.conf import settings
from django.db import models

from apps.artifacts.choices import CheckVerdict, PlatformStatus, StorageKind, UseRole


class Artifact(models.Model):
    """A digest and where its bytes can be fetched, owned by one team. A digest is not a container:
    consumers that need an image reference must require ``storage_kind == oci_registry``
    (``services.require_oci_image``).

    Bytes are shared, rows are not: the same digest at the same location is one row *per team*
    (``artifact_unique_location``), so an upload of bytes another team already stored makes the
    uploader's own row and never rewrites, reveals or moves the other's (docs/permissions.md "Artifact
    ownership"). Signature, key id and media type are set once and never changed."""

    digest = models.CharField(max_length=71, db_index=True, help_text="sha256:<64 hex>")
    storage_kind = models.CharField(max_length=20, choices=StorageKind.choices)
    reference = models.CharField(max_length=500, help_text="image ref, package, or object key")
    media_type = models.CharField(max_length=200, blank=True, default="")
    size = models.BigIntegerField(null=True, blank=True)
    platform = models.CharField(max_length=50, blank=True, default="", help_text="from the image config when readable")
    platform_status = models.CharField(max_length=20, choices=PlatformStatus.choices,
                                       default=PlatformStatus.NOT_APPLICABLE,
                                       help_text="known (read or declared), unknown (unreadable: not guessed)")
    # How the platform was found: "config" (image config), "index:grove:<p>" / "index:fallback:<p>"
    # (chosen from an OCI index), "declared" (given with an upload), or why it is unknown.
    platform_source = models.CharField(max_length=100, blank=True, default="")
    # Detached Ed25519 signature (base64) over the digest string, made by the release pipeline's key.
    signature = models.TextField(blank=True, default="")
    signing_key_id = models.CharField(max_length=100, blank=True, default="")
    producing_run_id = models.CharField(max_length=64, blank=True, default="", db_index=True)
    producing_node = models.CharField(max_length=100, blank=True, default="")
    producing_name = models.CharField(max_length=400, blank=True, default="",
                                      help_text="the output name (its key under the node's prefix)")
    # Who may read it: the team of the run that produced it, or of the user who uploaded it ("" = staff's).
    team = models.CharField(max_length=100, blank=True, default="", db_index=True)
    uploaded_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["digest", "storage_kind", "reference", "team"],
                                    name="artifact_unique_location")
        ]
        indexes = [models.Index(fields=["storage_kind", "platform"])]

    def __str__(self) -> str:
        return f"{self.storage_kind}:{self.reference}"


class ArtifactPlatformCheck(models.Model):
    """One artifact-platform decision under ``host.deploy.forest_compatibility``: a build_image output
    against its node's target, or an artifact against the Grove a workload is compiled for. With the flag
    off a mismatch is kept here as ``would_refuse`` and the work proceeds."""

    artifact = models.ForeignKey(Artifact, on_delete=models.CASCADE, related_name="platform_checks")
    subject_type = models.CharField(max_length=50)
    subject_id = models.CharField(max_length=200)
    grove = models.ForeignKey("groves.Grove", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    required = models.JSONField(default=list, help_text="platforms the artifact must run on (any of)")
    artifact_platform = models.CharField(max_length=50, blank=True, default="")
    verdict = models.CharField(max_length=20, choices=CheckVerdict.choices)
    enforced = models.BooleanField(default=False)
    code = models.CharField(max_length=100, blank=True, default="")
    detail = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["subject_type", "subject_id"])]

    def __str__(self) -> str:
        return f"{self.subject_type}:{self.subject_id} {self.verdict}"


class ArtifactUse(models.Model):
    """Lineage: one use of an artifact by one node of one pipeline run, as an input it consumed or an
    output it produced. Runs live above artifacts, so the run and node are plain columns (as on
    ``GroveJob``), not foreign keys up."""

    artifact = models.ForeignKey(Artifact, on_delete=models.CASCADE, related_name="uses")
    run_id = models.UUIDField(db_index=True)
    node = models.CharField(max_length=63)
    role = models.CharField(max_length=10, choices=UseRole.choices)
    name = models.CharField(max_length=400, help_text="the input's name, or the output's key")
    team = models.CharField(max_length=100, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [models.UniqueConstraint(fields=["run_id", "node", "role", "name"], name="artifact_use_unique")]
        indexes = [models.Index(fields=["artifact", "role"], name="artifact_use_by_artifact")]

    def __str__(self) -> str:
        return f"{self.run_id}:{self.node} {self.role} {self.name}"
