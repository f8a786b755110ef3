"""``TextChoices`` for artifact models, derived from ``vocabulary``."""
from apps.artifacts import vocabulary
from apps.core.choices import text_choices

StorageKind = text_choices(vocabulary.StorageKind, {"oci_registry": "OCI registry", "npm_registry": "npm registry",
                                                    "cas": "Content-addressed store"})
PlatformStatus = text_choices(vocabulary.PlatformStatus)
CheckVerdict = text_choices(vocabulary.CheckVerdict)
UseRole = text_choices(vocabulary.UseRole)
