"""Accelerator admission and the policy arithmetic. Pure: no Django, no database.

Admission answers "can this Grove's *reported* units hold the request right now, after what Host has
already claimed?". It is separate from the compatibility checker: a requested GPU, a reported device,
permission to consume it and successful execution on it are four different facts.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from apps.accelerators.vocabulary import (
    MAX_ACCELERATOR_COUNT,
    MAX_ACCELERATOR_MEMORY,
    SINGLE_DEVICE_VENDORS,
    VENDOR_APIS,
)
from apps.core import validation as v


@dataclass(frozen=True)
class AcceleratorRequest:
    """``count`` devices; ``vendor`` optional; ``api`` normalised from the vendor when not given."""

    count: int = 1
    vendor: str | None = None
    api: str | None = None
    min_memory_bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"count": self.count}
        if self.vendor:
            body["vendor"] = self.vendor
        if self.api:
            body["api"] = self.api
        if self.min_memory_bytes:
            body["min_memory_bytes"] = self.min_memory_bytes
        return body

    @classmethod
    def of_parsed(cls, *, count: int, vendor: str | None = None, api: str | None = None,
                  min_memory_bytes: int = 0) -> AcceleratorRequest:
        """Trusted: values ``parse_accelerators`` already read (a canonical node's, a stored requirement's);
        the api is implied from the vendor as the parser implies it."""
        return cls(count=count, vendor=vendor, api=api or VENDOR_APIS.get(vendor or ""),
                   min_memory_bytes=min_memory_bytes)


def request_problem(*, count: int, vendor: str | None, api: str | None) -> tuple[str, str, str] | None:
    """What spans a request's fields, over normalised values (stripped, lower case): ``(code, sentence, the
    key it names)``, or None. One rule for this reader and for the declared step body
    (``apps.pipelines.bodies.StepAccelerators``)."""
    implied = VENDOR_APIS.get(vendor or "")
    if api is not None and implied is not None and api != implied:
        return ("accelerator_api_mismatch",
                f"A {vendor} accelerator speaks {implied}, not {api}; drop 'api' or fix the vendor.", "api")
    if vendor in SINGLE_DEVICE_VENDORS and count != 1:
        return ("apple_accelerator_count",
                f"An Apple GPU request must have count 1 (one unified-memory GPU per machine), not {count}.", "count")
    return None


def parse_accelerators(value: Any, field_path: str = "accelerators") -> AcceleratorRequest:
    value = v.obj(value, field_path, allowed={"count", "vendor", "api", "min_memory_bytes"}, required={"count"})
    count = v.integer(value["count"], f"{field_path}.count", minimum=1, maximum=MAX_ACCELERATOR_COUNT)
    vendor = value.get("vendor")
    if vendor is not None:
        vendor = v.string(vendor, f"{field_path}.vendor", max_length=50).strip().lower()
    api = value.get("api")
    if api is not None:
        api = v.string(api, f"{field_path}.api", max_length=30).strip().lower()
    problem = request_problem(count=count, vendor=vendor, api=api)
    if problem is not None:
        code, detail, key = problem
        raise v.fail(code, detail, f"{field_path}.{key}")
    api = api or VENDOR_APIS.get(vendor or "")
    min_memory = v.integer(value.get("min_memory_bytes", 0), f"{field_path}.min_memory_bytes",
                           maximum=MAX_ACCELERATOR_MEMORY)
    return AcceleratorRequest(count=count, vendor=vendor, api=api, min_memory_bytes=min_memory)


@dataclass(frozen=True)
class Device:
    inventory_id: str
    vendor: str
    apis: tuple[str, ...]
    memory_bytes: int | None
    memory_kind: str  # dedicated | unified
    memory_enforced: bool
    share_mode: str  # exclusive | time_sliced | cooperative
    model: str = ""

    @property
    def cooperative(self) -> bool:
        """Unified memory nobody enforces (Apple) or a device shared by agreement: admission is advisory."""
        return (self.memory_kind == "unified" and not self.memory_enforced) or self.share_mode == "cooperative"


@dataclass(frozen=True)
class Slot:
    inventory_id: str
    allocatable: int
    free: int


@dataclass(frozen=True)
class Unit:
    unit_id: str
    slots: tuple[Slot, ...]


@dataclass(frozen=True)
class Refusal:
    code: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True)
class Admission:
    admitted: bool
    unit_id: str = ""
    allocations: tuple[tuple[str, int], ...] = ()  # (inventory_id, count)
    vendor: str = ""
    api: str = ""
    cooperative: bool = False
    refusals: tuple[Refusal, ...] = field(default_factory=tuple)

    @property
    def label(self) -> str:
        return "cooperative" if self.cooperative else "exclusive"


def _matches(request: AcceleratorRequest, device: Device) -> list[Refusal]:
    reasons = []
    if request.vendor and device.vendor != request.vendor:
        reasons.append(Refusal("accelerator_vendor_mismatch",
                               f"{device.inventory_id} is {device.vendor}, not {request.vendor}."))
    if request.api and request.api not in device.apis:
        reasons.append(Refusal("accelerator_api_mismatch",
                               f"{device.inventory_id} exposes {', '.join(device.apis) or 'no API'}, "
                               f"not {request.api}."))
    if request.min_memory_bytes:
        if device.memory_bytes is None:
            reasons.append(Refusal("accelerator_memory_unknown",
                                   f"{device.inventory_id} does not report its memory; the work needs "
                                   f"{request.min_memory_bytes} bytes."))
        elif device.memory_bytes < request.min_memory_bytes:
            # For unified, unenforced memory the reported figure is the working-set limit.
            what = "working-set limit" if device.cooperative else "memory"
            reasons.append(Refusal("accelerator_memory_insufficient",
                                   f"{device.inventory_id} reports a {what} of {device.memory_bytes} bytes; the "
                                   f"work needs {request.min_memory_bytes}."))
    return reasons


def effective_free(slot: Slot, claimed: int) -> int:
    """What Host may still hand out: the reported free count, but never more than allocatable minus
    Host's own active claims (a claim the Grove has not reported yet must still count, and one it
    has reported must not count twice)."""
    return max(0, min(slot.free, slot.allocatable - claimed))


def admit(request: AcceleratorRequest, *, units: Iterable[Unit], devices: Iterable[Device],
          claimed: Mapping[tuple[str, str], int], grove: str = "") -> Admission:
    """Admit ``request`` on one placement unit of a Grove, or say every reason why not.

    ``claimed`` maps (unit_id, inventory_id) to the count Host has already claimed there.
    All devices of one request come from one unit: a job runs on one machine or node.
    """
    inventory = {device.inventory_id: device for device in devices}
    if not inventory:
        return Admission(False, refusals=(Refusal("accelerator_none_reported",
                                                  f"Grove {grove} reports no accelerators."),))
    mismatches: dict[str, list[Refusal]] = {
        inventory_id: _matches(request, device) for inventory_id, device in inventory.items()
    }
    matching = {inventory_id for inventory_id, reasons in mismatches.items() if not reasons}
    if not matching:
        seen: dict[str, Refusal] = {}
        for inventory_id in sorted(mismatches):
            for reason in mismatches[inventory_id]:
                seen.setdefault(reason.code, reason)
        return Admission(False, refusals=tuple(sorted(seen.values(), key=lambda r: r.code)))
    best_free = 0
    total_claimed = 0
    for unit in sorted(units, key=lambda u: u.unit_id):
        allocations: list[tuple[str, int]] = []
        needed = request.count
        unit_free = 0
        for slot in sorted(unit.slots, key=lambda s: s.inventory_id):
            if slot.inventory_id not in matching:
                continue
            taken = claimed.get((unit.unit_id, slot.inventory_id), 0)
            total_claimed += taken
            free = effective_free(slot, taken)
            unit_free += free
            if needed and free:
                take = min(needed, free)
                allocations.append((slot.inventory_id, take))
                needed -= take
        best_free = max(best_free, unit_free)
        if needed == 0:
            chosen = [inventory[inventory_id] for inventory_id, _ in allocations]
            api = request.api or next((api for api in chosen[0].apis), "")
            return Admission(True, unit_id=unit.unit_id, allocations=tuple(allocations), vendor=chosen[0].vendor,
                             api=api, cooperative=any(device.cooperative for device in chosen))
    return Admission(False, refusals=(Refusal(
        "accelerator_unavailable",
        f"Grove {grove} has {len(matching)} matching accelerator(s) but no unit with {request.count} free "
        f"(at most {best_free} free in one unit after {total_claimed} claimed by Host)."),))


# --- policy arithmetic ---------------------------------------------------------------------------

def period_start(moment: datetime, period: str) -> date:
    """The first UTC day of the budget period holding ``moment``."""
    day = moment.astimezone(UTC).date()
    if period == "day":
        return day
    if period == "week":
        return day - timedelta(days=day.weekday())
    if period == "month":
        return day.replace(day=1)
    raise ValueError(f"unknown period {period!r}")


def split_by_day(start: datetime, end: datetime) -> list[tuple[date, float]]:
    """Seconds of [start, end) falling on each UTC day: usage rows are per claim per day, so any
    budget period (day, week, month) is a sum of whole rows."""
    out: list[tuple[date, float]] = []
    cursor = start.astimezone(UTC)
    end = end.astimezone(UTC)
    while cursor < end:
        next_midnight = datetime.combine(cursor.date() + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
        upto = min(end, next_midnight)
        out.append((cursor.date(), (upto - cursor).total_seconds()))
        cursor = upto
    return out
