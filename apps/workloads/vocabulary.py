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
# The SIGTERM-to-SIGKILL grace a workload may declare (``stop_grace_s``), in whole seconds. The agent, which
# may not import Host, bounds the wire field itself (a positive number, at most its own MAX_STOP_GRACE_S):
# tests/workloads/test_stop_grace.py holds Host's bounds to what the agent's reader accepts.
MIN_STOP_GRACE_S = 1
MAX_STOP_GRACE_S = 3600
