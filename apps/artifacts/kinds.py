"""The artifact vocabulary, as plain constants (no Django): where bytes live and what is known about an
artifact's platform. ``choices.py`` builds the model choices from these, and pure rules elsewhere (the
pipeline graph's inputs, GRAPH_DEDUP) read the same names, so there is one definition of each."""
from __future__ import annotations

OCI_REGISTRY = "oci_registry"
NPM_REGISTRY = "npm_registry"
CAS = "cas"
EVIDENCE = "evidence"
STORAGE_KINDS: tuple[str, ...] = (OCI_REGISTRY, NPM_REGISTRY, CAS, EVIDENCE)
STORAGE_KIND_LABELS = {OCI_REGISTRY: "OCI registry", NPM_REGISTRY: "npm registry",
                       CAS: "Content-addressed store", EVIDENCE: "Evidence"}

# What is known about ``Artifact.platform``: read from the image config (or given with a CAS upload),
# unknown (the config could not be read: recorded as such, never guessed), or not applicable.
PLATFORM_KNOWN = "known"
PLATFORM_UNKNOWN = "unknown"
PLATFORM_NOT_APPLICABLE = "not_applicable"
PLATFORM_STATUSES: tuple[str, ...] = (PLATFORM_KNOWN, PLATFORM_UNKNOWN, PLATFORM_NOT_APPLICABLE)

# Verdicts of an artifact-platform check (build_image output, runtime compilation).
CHECK_OK = "ok"
CHECK_REFUSED = "refused"
CHECK_WOULD_REFUSE = "would_refuse"
CHECK_UNKNOWN = "platform_unknown"
CHECK_VERDICTS: tuple[str, ...] = (CHECK_OK, CHECK_REFUSED, CHECK_WOULD_REFUSE, CHECK_UNKNOWN)


def is_container_image(storage_kind: str) -> bool:
    """Only an OCI registry artifact names something a container runtime can pull; a CAS digest does not."""
    return storage_kind == OCI_REGISTRY
