"""The accelerator claim's lifecycle: only an active claim ends, and it ends once. Pure: no Django."""
from __future__ import annotations

from apps.accelerators.vocabulary import ClaimState as C
from apps.core.lifecycle import Lifecycle

CLAIM = Lifecycle.of("accelerator claim", {
    C.ACTIVE: {C.RELEASED, C.REVOKED},
    C.RELEASED: set(),
    C.REVOKED: set(),
}, column="state", terminal_stamp="ended_at", code="illegal_claim_transition")
