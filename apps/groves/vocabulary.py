"""The Grove domain's vocabulary (docs/design.md §2) and the limits of what a Grove may report: one value each.
Pure: stdlib only. The string values are wire contract.

The resource ceilings bound both a Grove's capacity report and the work that asks for capacity: a
request larger than anything a Grove could ever report is refused as input, not queued forever.
"""
from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    """What a Grove runs; a requirement's ``family`` names the role it needs."""

    BUILD = "build"
    RUNTIME = "runtime"
    COMPUTE = "compute"


class Substrate(StrEnum):
    KUBERNETES = "kubernetes"
    NATIVE = "native"


class ChangeKind(StrEnum):
    K8S_BUILD_JOB = "k8s.build_job"
    K8S_JOB = "k8s.job"
    K8S_DEPLOYMENT = "k8s.deployment"
    NATIVE_JOB = "native.job"
    NATIVE_WORKLOAD = "native.workload"


class IsolationMode(StrEnum):
    CONTAINER = "container"
    VM = "vm"
    HOST_PROCESS = "host_process"


class AcceleratorKind(StrEnum):
    GPU = "gpu"
    NPU = "npu"
    TPU = "tpu"
    FPGA = "fpga"


class MemoryKind(StrEnum):
    DEDICATED = "dedicated"
    UNIFIED = "unified"


class ShareMode(StrEnum):
    EXCLUSIVE = "exclusive"
    TIME_SLICED = "time_sliced"
    COOPERATIVE = "cooperative"


class CapabilityKind(StrEnum):
    ROLE = "role"
    PLATFORM = "platform"
    CHANGE_KIND = "change_kind"
    ISOLATION = "isolation"
    ACCELERATOR_API = "accelerator_api"


# Change kinds each substrate can advertise at all (the "substrate" rule).
SUBSTRATE_CHANGE_KINDS = {
    Substrate.KUBERNETES: frozenset({ChangeKind.K8S_BUILD_JOB, ChangeKind.K8S_JOB, ChangeKind.K8S_DEPLOYMENT}),
    Substrate.NATIVE: frozenset({ChangeKind.NATIVE_JOB, ChangeKind.NATIVE_WORKLOAD}),
}


def substrate_for_change_kind(change_kind: str) -> str | None:
    """The substrate a change kind needs (``native.*`` -> native, ``k8s.*`` -> kubernetes)."""
    for substrate, kinds in SUBSTRATE_CHANGE_KINDS.items():
        if change_kind in kinds:
            return substrate.value
    return None


# A Grove's platform list, and any list of acceptable platforms, holds at most this many entries.
MAX_PLATFORMS = 32
MAX_UNITS = 1024
MAX_INVENTORY_ITEMS = 1024
MAX_LOG_LINES = 500
MAX_LOG_LINE = 4000
# Generous ceilings: anything above is a bug or an attack, not a machine.
MAX_CPU_MILLI = 100_000_000  # 100k cores
MAX_MEMORY_BYTES = 1 << 52  # 4 PiB
MAX_ACCELERATOR_COUNT = 4096
MAX_ACCELERATOR_MEMORY = 1 << 44  # 16 TiB
