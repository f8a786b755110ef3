"""NVIDIA inventory from `nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits`.

Each GPU becomes one item: api CUDA, dedicated memory that the driver enforces, exclusive use.
`memory.total` is in MiB with `nounits`; `[N/A]` (or any non-number) means unknown (null).
"""

from __future__ import annotations

import logging

from forest_agent.inventory.item import AcceleratorItem
from forest_agent.oskit import CommandRunner

log = logging.getLogger(__name__)

NVIDIA_SMI_ARGV = [
    "nvidia-smi",
    "--query-gpu=index,uuid,name,memory.total",
    "--format=csv,noheader,nounits",
]
_MIB = 1024 * 1024


def parse_nvidia_smi(text: str) -> list[AcceleratorItem]:
    items: list[AcceleratorItem] = []
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if not line:
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 4:
            log.warning("ignoring unparseable nvidia-smi line: %r", raw_line)
            continue
        # A GPU name could in principle contain a comma; index and uuid lead, memory ends the line.
        index, uuid, memory = fields[0], fields[1], fields[-1]
        name = ", ".join(fields[2:-1])
        if not index.isdigit() or not uuid or uuid.startswith("["):
            log.warning("ignoring nvidia-smi line without index/uuid: %r", raw_line)
            continue
        items.append(
            AcceleratorItem(
                id=uuid,
                kind="gpu",
                vendor="nvidia",
                model=name,
                apis=("cuda",),
                memory_bytes=int(memory) * _MIB if memory.isdigit() else None,
                memory_kind="dedicated",
                memory_enforced=True,
                share_mode="exclusive",
            )
        )
    return items


def collect_nvidia(runner: CommandRunner) -> list[AcceleratorItem]:
    result = runner.run(NVIDIA_SMI_ARGV)
    if result is None:
        return []
    if result.returncode != 0:
        # "No devices were found" (rc 6) or a driver mismatch (rc 9): no usable GPUs, say why once.
        reason = (result.stdout or result.stderr).strip().splitlines()[:1]
        log.info(
            "nvidia-smi reported no usable GPUs (rc %s): %s", result.returncode, reason[0] if reason else ""
        )
        return []
    return parse_nvidia_smi(result.stdout)
