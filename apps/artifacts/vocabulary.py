"""The artifact domain's vocabulary: where an artifact's bytes live. Pure: stdlib only."""
from __future__ import annotations

from enum import StrEnum


class StorageKind(StrEnum):
    OCI_REGISTRY = "oci_registry"
    NPM_REGISTRY = "npm_registry"
    CAS = "cas"
    EVIDENCE = "evidence"
