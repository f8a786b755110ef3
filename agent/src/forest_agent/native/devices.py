"""Which GPUs a native job may see: exactly the devices Host claimed for it, never all of them.

The NVIDIA inventory ids are the GPUs' UUIDs as `nvidia-smi` prints them (`GPU-…`, `MIG-…` for MIG
instances), which is also a form CUDA and the NVIDIA container runtime accept in
`CUDA_VISIBLE_DEVICES` / `NVIDIA_VISIBLE_DEVICES`. A job that claimed no NVIDIA device gets an empty
`CUDA_VISIBLE_DEVICES` (CUDA then sees no device) and `NVIDIA_VISIBLE_DEVICES=void`. These are set
after the payload's own env, so a job cannot widen its claim by naming the variables itself.
"""

from __future__ import annotations

from collections.abc import Iterable

NVIDIA_ID_PREFIXES = ("GPU-", "MIG-")


def nvidia_device_env(claimed: Iterable[str]) -> dict[str, str]:
    ids = [d for d in claimed if d.startswith(NVIDIA_ID_PREFIXES)]
    return {
        "CUDA_VISIBLE_DEVICES": ",".join(ids),
        "NVIDIA_VISIBLE_DEVICES": ",".join(ids) if ids else "void",
        # Device order then follows the ids, not CUDA's "fastest first" guess.
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }
