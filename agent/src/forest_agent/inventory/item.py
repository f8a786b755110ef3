"""The accelerator inventory item (docs/design.md §2): what every platform's parser returns and the heartbeat
sends. Its own module so the parsers (``nvidia``, ``apple``) and the collector that picks one of them
(``accelerators``) import it from below and never each other's callers."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


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
