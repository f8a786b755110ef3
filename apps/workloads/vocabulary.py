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
# The longest SIGTERM-to-SIGKILL grace a workload may declare (``stop_grace_s``). The agent, which may not
# import Host, bounds the wire field with its own constant (forest_agent.wire.messages.MAX_STOP_GRACE_S);
# tests/workloads/test_stop_grace.py holds the two equal.
MAX_STOP_GRACE_S = 3600
