"""Resource admission: does a requirement fit one reported unit of a Grove — CPU, memory and accelerators
together — now, later, or never? Pure: no Django, no database.

A Grove reports each placement unit's *allocatable* and *free* CPU and memory, and per accelerator slot its
allocatable and free counts (docs/wire.md). Admission reads them as two questions:

* **never** — no unit's allocatable CPU and memory (with its matching accelerators, allocatable) can hold
  the work: waiting would never help. Codes ``resources_never_fit``, ``accelerator_never_fits`` and the
  device-match codes of ``apps.accelerators.rules`` (vendor, API, device memory).
* **later** — some unit could, but none has it free now (free CPU/memory as reported; free accelerators
  after Host's active claims): the work waits for capacity. Codes ``resources_unavailable``,
  ``accelerator_unavailable``.
* **now** — one unit holds it all; ``unit_id`` and the accelerator ``admission`` say which and what.

The verdict's sentence says by how much ("needs 16 CPU, the largest free unit of g has 8"). The same
function serves the decision (preview and dispatch) and the admission queue's wake-up, which simulates
several admissions on one Grove by ``consume``-ing what each admitted one takes.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from apps.accelerators import rules as accelerator_rules
from apps.core.formatting import bytes_h, cores
from apps.placement import scoring


class FitState(StrEnum):
    NOW = "now"
    LATER = "later"
    NEVER = "never"


RESOURCES_NEVER_FIT = "resources_never_fit"
RESOURCES_UNAVAILABLE = "resources_unavailable"
ACCELERATOR_NEVER_FITS = "accelerator_never_fits"
ACCELERATOR_UNAVAILABLE = "accelerator_unavailable"
# Every code a verdict can carry for "not now, but later" (the queue waits on these).
LATER_CODES = frozenset({RESOURCES_UNAVAILABLE, ACCELERATOR_UNAVAILABLE})


@dataclass(frozen=True, slots=True)
class UnitCapacity:
    """One reported placement unit, as admission reads it."""

    unit_id: str
    cpu_allocatable: int
    cpu_free: int
    memory_allocatable: int
    memory_free: int
    slots: tuple[accelerator_rules.Slot, ...] = ()

    def accelerators(self, *, allocatable: bool = False) -> accelerator_rules.Unit:
        slots = self.slots if not allocatable else tuple(
            accelerator_rules.Slot(slot.inventory_id, slot.allocatable, slot.allocatable) for slot in self.slots)
        return accelerator_rules.Unit(self.unit_id, slots)


@dataclass(frozen=True, slots=True)
class Needs:
    cpu_milli: int
    memory_bytes: int
    accelerators: accelerator_rules.AcceleratorRequest | None = None

    @classmethod
    def of(cls, requirement) -> Needs:
        """From an ``ExecutionRequirement`` (anything with ``resources`` and ``accelerators``)."""
        return cls(requirement.resources.cpu_milli, requirement.resources.memory_bytes, requirement.accelerators)


@dataclass(frozen=True, slots=True)
class Fit:
    state: str
    code: str = ""
    message: str = ""
    unit_id: str = ""
    admission: accelerator_rules.Admission | None = None
    reasons: tuple[accelerator_rules.Refusal, ...] = field(default_factory=tuple)

    @property
    def now(self) -> bool:
        return self.state == FitState.NOW

    def to_json(self) -> dict:
        body: dict = {"state": self.state}
        if self.code:
            body.update(code=self.code, message=self.message)
        if self.unit_id:
            body["unit_id"] = self.unit_id
        return body


def units_of(facts, *, free=None) -> tuple[UnitCapacity, ...]:
    """A Grove's units as admission reads them, from its ``GroveFacts``: allocatable as reported, free as
    reported less Host's placements since (``free``, the same (unit id, CPU, memory) rows, when a batch has
    assumed more), accelerator slots as reported (Host's claims are passed to ``fit`` beside them)."""
    free_by_unit = {unit_id: (cpu, memory) for unit_id, cpu, memory in (facts.unit_free if free is None else free)}
    slots = {unit.unit_id: tuple(unit.slots) for unit in facts.accelerator_units} if facts.accelerator_units else {}
    units = []
    for unit_id, cpu, memory in facts.unit_allocatable:
        cpu_free, memory_free = free_by_unit.get(unit_id, (0, 0))
        units.append(UnitCapacity(unit_id, cpu, cpu_free, memory, memory_free, slots.get(unit_id, ())))
    return tuple(units)


def _largest(units: Sequence[UnitCapacity], attribute: str) -> int:
    return max((getattr(unit, attribute) for unit in units), default=0)


def _short(needs: Needs, units: Sequence[UnitCapacity], *, which: str, grove: str) -> str:
    """The sentence for CPU/memory that no unit holds (``which``: "allocatable" or "free")."""
    cpu, memory = f"cpu_{which}", f"memory_{which}"
    label = "unit" if which == "allocatable" else "free unit"
    if _largest(units, cpu) < needs.cpu_milli:
        return (f"needs {cores(needs.cpu_milli)} CPU, the largest {label} of Grove {grove} has "
                f"{cores(_largest(units, cpu))}")
    if _largest(units, memory) < needs.memory_bytes:
        return (f"needs {bytes_h(needs.memory_bytes)} memory, the largest {label} of Grove {grove} has "
                f"{bytes_h(_largest(units, memory))}")
    return (f"needs {cores(needs.cpu_milli)} CPU and {bytes_h(needs.memory_bytes)} memory on one unit; no "
            f"{'unit' if which == 'allocatable' else 'unit with both free'} of Grove {grove} has both")


def unit_for(cpu: int, memory: int, allocatable: Sequence[tuple[str, int, int]], free: Sequence,
             *, spread: bool) -> str | None:
    """The unit that takes work without accelerators now, of the Grove's units in its order (``allocatable``:
    (unit id, CPU, memory); ``free``: (unit id, free CPU, free memory), the same units in the same order):
    among those whose allocatable and free both hold it, the least allocated once it is placed under
    spread (``scoring.allocated``; the first such on equal shares), else the first. ``None``: none holds
    it now. Spreading within the Grove as across Groves keeps a unit from filling while its siblings
    are empty: a kube Grove's nodes are what kube-scheduler's LeastAllocated spreads over, and two
    writers deciding at once from the same view rarely both fill one unit's last room."""
    chosen, best = None, 2.0
    for (unit_id, cpu_allocatable, memory_allocatable), row in zip(allocatable, free, strict=True):
        if (row[0] != unit_id or cpu_allocatable < cpu or memory_allocatable < memory or row[1] < cpu
                or row[2] < memory):
            continue
        if not spread:
            return unit_id
        share = scoring.allocated(cpu, memory, cpu_allocatable, row[1], memory_allocatable, row[2])
        if share < best:
            chosen, best = unit_id, share
    return chosen


def fit(needs: Needs, *, units: Sequence[UnitCapacity], devices: Sequence[accelerator_rules.Device] = (),
        claimed: Mapping[tuple[str, str], int] | None = None, grove: str = "", spread: bool = False) -> Fit:
    """Whether ``needs`` fits one unit of the Grove now, later, or never (see the module docstring); work
    without accelerators that fits now goes to ``unit_for``'s unit (``spread``: the policy's)."""
    claimed = claimed or {}
    if not units:
        return Fit(FitState.NEVER, RESOURCES_NEVER_FIT, f"Grove {grove} reports no placement unit.")
    ever = [unit for unit in units
            if unit.cpu_allocatable >= needs.cpu_milli and unit.memory_allocatable >= needs.memory_bytes]
    if not ever:
        return Fit(FitState.NEVER, RESOURCES_NEVER_FIT, _short(needs, units, which="allocatable", grove=grove) + ".")
    request = needs.accelerators
    if request is not None:
        possible = accelerator_rules.admit(request, units=[unit.accelerators(allocatable=True) for unit in ever],
                                           devices=devices, claimed={}, grove=grove)
        if not possible.admitted:
            reasons = possible.refusals
            if [reason.code for reason in reasons] == [ACCELERATOR_UNAVAILABLE]:
                most = max((sum(slot.allocatable for slot in unit.slots) for unit in ever), default=0)
                reasons = (accelerator_rules.Refusal(
                    ACCELERATOR_NEVER_FITS,
                    f"needs {request.count} accelerator(s) on one unit, the largest unit of Grove {grove} that "
                    f"holds the CPU and memory has {most} allocatable."),)
            return Fit(FitState.NEVER, reasons[0].code, " ".join(reason.message for reason in reasons),
                       reasons=reasons)
    free = [unit for unit in ever if unit.cpu_free >= needs.cpu_milli and unit.memory_free >= needs.memory_bytes]
    if not free:
        return Fit(FitState.LATER, RESOURCES_UNAVAILABLE, _short(needs, ever, which="free", grove=grove) + ".")
    if request is None:
        unit_id = unit_for(needs.cpu_milli, needs.memory_bytes,
                           [(u.unit_id, u.cpu_allocatable, u.memory_allocatable) for u in free],
                           [(u.unit_id, u.cpu_free, u.memory_free) for u in free], spread=spread)
        assert unit_id is not None  # every unit of ``free`` holds the work
        return Fit(FitState.NOW, unit_id=unit_id)
    admission = accelerator_rules.admit(request, units=[unit.accelerators() for unit in free], devices=devices,
                                        claimed=claimed, grove=grove)
    if not admission.admitted:
        return Fit(FitState.LATER, ACCELERATOR_UNAVAILABLE, " ".join(r.message for r in admission.refusals),
                   admission=admission, reasons=admission.refusals)
    return Fit(FitState.NOW, unit_id=admission.unit_id, admission=admission)


def consume(units: Sequence[UnitCapacity], claimed: dict[tuple[str, str], int], needs: Needs,
            verdict: Fit) -> list[UnitCapacity]:
    """The units after an admitted ``verdict`` takes its share (``claimed`` is updated in place): how the
    queue's wake-up admits several waiting entries on one Grove without handing the same unit out twice."""
    if verdict.admission is not None:
        for inventory_id, count in verdict.admission.allocations:
            key = (verdict.unit_id, inventory_id)
            claimed[key] = claimed.get(key, 0) + count
    return [replace(unit, cpu_free=unit.cpu_free - needs.cpu_milli, memory_free=unit.memory_free - needs.memory_bytes)
            if unit.unit_id == verdict.unit_id else unit for unit in units]
