"""``TextChoices`` for Grove models and forms, derived from ``vocabulary`` (the values are written there)."""
from apps.core.choices import text_choices
from apps.groves import vocabulary

Role = text_choices(vocabulary.Role)
Substrate = text_choices(vocabulary.Substrate)
ChangeKind = text_choices(vocabulary.ChangeKind, {
    "k8s.build_job": "Kubernetes BuildJob", "k8s.job": "Kubernetes Job", "k8s.deployment": "Kubernetes Deployment",
    "native.job": "NativeJob", "native.workload": "Native workload"})
IsolationMode = text_choices(vocabulary.IsolationMode, {"vm": "VM"})
AcceleratorKind = text_choices(vocabulary.AcceleratorKind, {"gpu": "GPU", "npu": "NPU", "tpu": "TPU", "fpga": "FPGA"})
MemoryKind = text_choices(vocabulary.MemoryKind)
ShareMode = text_choices(vocabulary.ShareMode, {"time_sliced": "Time-sliced"})
CapabilityKind = text_choices(vocabulary.CapabilityKind, {"accelerator_api": "Accelerator API"})
