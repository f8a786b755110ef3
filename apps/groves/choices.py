"""Enumerations of the Grove domain (DESIGN.md §2). The string values are wire contract."""
from django.db import models


class Role(models.TextChoices):
    BUILD = "build", "Build"
    RUNTIME = "runtime", "Runtime"
    COMPUTE = "compute", "Compute"


class Substrate(models.TextChoices):
    KUBERNETES = "kubernetes", "Kubernetes"
    NATIVE = "native", "Native"


class ChangeKind(models.TextChoices):
    K8S_BUILD_JOB = "k8s.build_job", "Kubernetes BuildJob"
    K8S_JOB = "k8s.job", "Kubernetes Job"
    K8S_DEPLOYMENT = "k8s.deployment", "Kubernetes Deployment"
    NATIVE_JOB = "native.job", "NativeJob"
    NATIVE_WORKLOAD = "native.workload", "Native workload"


class IsolationMode(models.TextChoices):
    CONTAINER = "container", "Container"
    VM = "vm", "VM"
    HOST_PROCESS = "host_process", "Host process"


class AcceleratorKind(models.TextChoices):
    GPU = "gpu", "GPU"
    NPU = "npu", "NPU"
    TPU = "tpu", "TPU"
    FPGA = "fpga", "FPGA"


class MemoryKind(models.TextChoices):
    DEDICATED = "dedicated", "Dedicated"
    UNIFIED = "unified", "Unified"


class ShareMode(models.TextChoices):
    EXCLUSIVE = "exclusive", "Exclusive"
    TIME_SLICED = "time_sliced", "Time-sliced"
    COOPERATIVE = "cooperative", "Cooperative"


class CapabilityKind(models.TextChoices):
    ROLE = "role", "Role"
    PLATFORM = "platform", "Platform"
    CHANGE_KIND = "change_kind", "Change kind"
    ISOLATION = "isolation", "Isolation"
    ACCELERATOR_API = "accelerator_api", "Accelerator API"


# Change kinds each substrate can advertise at all (DESIGN.md §2, "substrate" rule).
SUBSTRATE_CHANGE_KINDS = {
    Substrate.KUBERNETES: {ChangeKind.K8S_BUILD_JOB, ChangeKind.K8S_JOB, ChangeKind.K8S_DEPLOYMENT},
    Substrate.NATIVE: {ChangeKind.NATIVE_JOB, ChangeKind.NATIVE_WORKLOAD},
}
