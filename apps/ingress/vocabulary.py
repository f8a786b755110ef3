"""The ingress domain's vocabulary: one value each. Pure: stdlib only."""
from __future__ import annotations

from enum import StrEnum

from apps.flags.registry import NATIVE_INGRESS

NATIVE_INGRESS_FLAG = NATIVE_INGRESS
EDGE_ACTOR = "forest-edge"


class RouteState(StrEnum):
    PENDING = "pending"  # derived, not yet accepted by the edge's nginx
    SERVING = "serving"  # in the configuration nginx accepted and reloaded
    FAILED = "failed"  # nginx refused its server block (last_error holds nginx's words)


class RouteAction(StrEnum):
    """Audit actions the edge records."""

    APPEARED = "ingress.route_appeared"
    GONE = "ingress.route_gone"
