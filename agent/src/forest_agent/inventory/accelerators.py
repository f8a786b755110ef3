"""The accelerator inventory item (docs/design.md §2) and collection for the current platform."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

from forest_agent.oskit import CommandRunner

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AcceleratorItem:
    id: str
    kind: str
    vendor: str
    model: str
    apis: tuple[str, ...]
    memory_bytes: int | None
    memory_kind: str  # "dedicated" | "unified"
    memory_enforced: bool
    share_mode: str  # "exclusive" | "time_sliced" | "cooperative"

    def to_wire(self) -> dict[str, Any]:
        data = asdict(self)
        data["apis"] = list(self.apis)
        return data


def collect_accelerators(runner: CommandRunner, platform: str) -> list[AcceleratorItem]:
    """NVIDIA on Linux, the Apple GPU on darwin/arm64; anything else (or absent tools) is none."""
    # Imported here so each parser module stays importable and testable on its own.
    from forest_agent.inventory.apple import collect_apple
    from forest_agent.inventory.nvidia import collect_nvidia

    if platform.startswith("linux/"):
        return collect_nvidia(runner)
    if platform == "darwin/arm64":
        return collect_apple(runner)
    log.info("no accelerator inventory for platform %s", platform)
    return []
