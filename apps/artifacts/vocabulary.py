"""The artifact domain's vocabulary: where an artifact's bytes live, what is known about its platform, and
the verdicts of an artifact-platform check. One value each. Pure: stdlib only. ``choices.py`` derives the
model choices from these; pure rules elsewhere (the pipeline graph's inputs, GRAPH_DEDUP) read them too."""
from __future__ import annotations

from enum import StrEnum


class StorageKind(StrEnum):
    OCI_REGISTRY = "oci_registry"
    NPM_REGISTRY = "npm_registry"
    CAS = "cas"
    EVIDENCE = "evidence"


class PlatformStatus(StrEnum):
    """What is known about ``Artifact.platform``: read from the image config (or given with a CAS upload),
    unknown (the config could not be read: recorded as such, never guessed), or not applicable."""

    KNOWN = "known"
    UNKNOWN = "unknown"
    NOT_APPLICABLE = "not_applicable"


class CheckVerdict(StrEnum):
    """Verdicts of an artifact-platform check (build_image output, runtime compilation)."""

    OK = "ok"
    REFUSED = "refused"
    WOULD_REFUSE = "would_refuse"
    PLATFORM_UNKNOWN = "platform_unknown"


class UseRole(StrEnum):
    """How a pipeline node used an artifact (a lineage row): it consumed it, or it produced it."""

    INPUT = "input"
    OUTPUT = "output"


# How far an artifact's lineage is followed (producer, consumers, their outputs, ...): each hop is one
# query, and a page or CLI answer must stay small.
MAX_LINEAGE_DEPTH = 5
MAX_LINEAGE_ROWS = 500


def is_container_image(storage_kind: str) -> bool:
    """Only an OCI registry artifact names something a container runtime can pull; a CAS digest does not."""
    return storage_kind == StorageKind.OCI_REGISTRY
