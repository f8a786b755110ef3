"""The capacity report for the heartbeat: one placement unit (the machine) plus accelerators.

`free` equals `allocatable`: the agent does not know what Host reserved for the work it sent, and a
capacity report describes capacity, never measured utilisation (docs/design.md §2).
"""

from __future__ import annotations

from typing import Any

import psutil

from forest_agent.inventory.item import AcceleratorItem

PLACEMENT_UNIT_ID = "machine"


def capacity_report(
    accelerators: list[AcceleratorItem], *, cpu_count: int | None = None, memory_bytes: int | None = None
) -> dict[str, Any]:
    cpus = cpu_count if cpu_count is not None else (psutil.cpu_count(logical=True) or 1)
    memory = memory_bytes if memory_bytes is not None else psutil.virtual_memory().total
    return {
        "placement_units": [
            {
                "id": PLACEMENT_UNIT_ID,
                "cpu_milli": {"allocatable": cpus * 1000, "free": cpus * 1000},
                "memory_bytes": {"allocatable": memory, "free": memory},
                "accelerators": [{"inventory_id": a.id, "allocatable": 1, "free": 1} for a in accelerators],
            }
        ],
        "accelerators": [a.to_wire() for a in accelerators],
    }
