from django.db import models


class StorageKind(models.TextChoices):
    OCI_REGISTRY = "oci_registry", "OCI registry"
    NPM_REGISTRY = "npm_registry", "npm registry"
    CAS = "cas", "Content-addressed store"
    EVIDENCE = "evidence", "Evidence"
