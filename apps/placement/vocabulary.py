"""Placement's vocabulary: what a requirement may say, and how a decision is made. One value each.
Pure: stdlib only. The string values are stored and appear in the API.

The role, change kind and isolation values are the Grove domain's (``apps.groves.vocabulary``): a
requirement asks for exactly what a Grove can advertise.
"""
from __future__ import annotations

from enum import StrEnum

from apps.flags.registry import FOREST_COMPATIBILITY, PERSISTED_PLACEMENT
from apps.groves.vocabulary import ChangeKind, IsolationMode, Role


class ArtifactKind(StrEnum):
    OCI_IMAGE = "oci_image"
    NATIVE_BUNDLE = "native_bundle"
    HOST_COMMAND = "host_command"
    NONE = "none"


class Trust(StrEnum):
    TRUSTED = "trusted"
    UNTRUSTED = "untrusted"


class SubjectType(StrEnum):
    PIPELINE_NODE = "pipeline_node"
    WORKLOAD_GENERATION = "workload_generation"
    COMPUTE_STEP = "compute_step"


class Chooser(StrEnum):
    # The requirement (or the caller) named the Grove: compatibility is still checked.
    EXPLICIT = "explicit"
    # Selection among fresh Groves holding the role, ranked by platform preference and capacity fit.
    SELECTION = "selection"
    # Shadow mode: nothing compatible, so the old role-only choice was made and recorded as would-refuse.
    FALLBACK = "fallback"


class Outcome(StrEnum):
    """What a decision came to. Every decision is stored (one row per subject); only ``placed`` names a Grove,
    and only a ``placed`` row is ever re-read by a retry."""

    PLACED = "placed"
    # Could fit an eligible Grove, not now: the subject waits in the admission queue (``waiting_for_capacity``).
    WAITING = "waiting"
    # Refused (compatibility enforced, never fits, policy, no Grove): the row keeps the code and the verdicts.
    REFUSED = "refused"


WAITING_FOR_CAPACITY = "waiting_for_capacity"

FAMILIES = tuple(Role)
ARTIFACT_KINDS = tuple(ArtifactKind)
CHANGE_KINDS = tuple(ChangeKind)
ISOLATION_MODES = tuple(IsolationMode)
TRUST_LEVELS = tuple(Trust)

DEFAULT_CPU_MILLI = 1000
DEFAULT_MEMORY_BYTES = 1 << 30

COMPATIBILITY_FLAG = FOREST_COMPATIBILITY
PERSISTED_FLAG = PERSISTED_PLACEMENT

# The most subjects one batch places (the API's ``POST placements/batch`` and every internal caller): one
# transaction holds the unit locks of every Grove it touches, so its size bounds how long others wait.
MAX_BATCH_SIZE = 5000
# Candidates a batch-placed subject keeps in its own compact decision (its full verdicts are shared).
BATCH_TOP_CANDIDATES = 3
