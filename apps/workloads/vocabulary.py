"""The native workload domain's vocabulary: one value each. Pure: stdlib only."""
from __future__ import annotations

from enum import StrEnum

from apps.flags.registry import NATIVE_INGRESS


class GenerationState(StrEnum):
    PENDING = "pending"
    STARTING = "starting"
    LIVE = "live"
    CRASH_LOOP = "crash_loop"
    FAILED = "failed"
    STOPPED = "stopped"
    SUPERSEDED = "superseded"


class SecretsMode(StrEnum):
    ENV = "env"
    FILE = "file"


class ProbeResult(StrEnum):
    PASSING = "passing"
    FAILING = "failing"
    UNKNOWN = "unknown"


NATIVE_INGRESS_FLAG = NATIVE_INGRESS
