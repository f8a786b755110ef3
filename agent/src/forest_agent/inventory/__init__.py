"""What this machine can run: accelerator inventory items and the one machine placement unit.

Descriptions of capacity, never measured utilisation (docs/design.md §2).
"""

from forest_agent.inventory.accelerators import collect_accelerators
from forest_agent.inventory.capacity import capacity_report
from forest_agent.inventory.item import AcceleratorItem

__all__ = ["AcceleratorItem", "capacity_report", "collect_accelerators"]
