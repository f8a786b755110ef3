"""Nodes + Pods -> the capacity report (DESIGN.md §2): one placement unit per schedulable Node and one
accelerator inventory item per GPU Node, from NVIDIA GPU Feature Discovery (GFD) labels. Pure.

* Unit `id` is the Node name; `allocatable` is the Node's `status.allocatable`; `free` subtracts the
  requests of the Pods bound to it that have not finished (this is what the scheduler would count,
  not measured utilisation).
* A Node with `nvidia.com/gpu.present=true` (or allocatable `nvidia.com/gpu`) becomes an item
  `<node>/nvidia`: vendor nvidia, api cuda, model `nvidia.com/gpu.product`, memory
  `nvidia.com/gpu.memory` (MiB) in bytes, dedicated. Share mode: `nvidia.com/gpu.sharing-strategy`
  `time-slicing` or `mps` -> time_sliced (memory not enforced); MIG (`nvidia.com/mig.strategy` single)
  -> exclusive slices whose product/memory GFD already describes; otherwise exclusive. The unit lists it
  with `allocatable`/`free` counts of `nvidia.com/gpu`.
* Unschedulable (cordoned) Nodes and Nodes that are not Ready report no free capacity.
A cluster with no GPU Nodes reports no accelerators.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

from forest_agent.inventory.item import AcceleratorItem
from forest_agent.kube.render import GFD_MEMORY, GFD_PRESENT, GFD_PRODUCT, GPU_RESOURCE

GFD_SHARING = "nvidia.com/gpu.sharing-strategy"
_MIB = 1024 * 1024

Obj = dict[str, Any]


def _quantity(value: Any) -> Decimal:
    try:
        amount: Decimal = parse_quantity(value) if value is not None else Decimal(0)
        return amount
    except ValueError:
        return Decimal(0)


def _requests(pod: Obj) -> dict[str, Decimal]:
    """A pod's effective requests: the sum of its containers (limits stand in for a missing request,
    as for extended resources), or the largest init container if that is more."""
    spec = pod.get("spec") or {}

    def total(containers: list[Obj]) -> dict[str, Decimal]:
        out: dict[str, Decimal] = {}
        for c in containers:
            resources = c.get("resources") or {}
            merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
            for name, amount in merged.items():
                out[name] = out.get(name, Decimal(0)) + _quantity(amount)
        return out

    main = total(spec.get("containers") or [])
    for init in spec.get("initContainers") or []:
        for name, amount in total([init]).items():
            main[name] = max(main.get(name, Decimal(0)), amount)
    return main


def _ready(node: Obj) -> bool:
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    conditions: list[Obj] = (node.get("status") or {}).get("conditions") or []
    for condition in conditions:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def node_platform(node: Obj) -> str | None:
    labels = (node.get("metadata") or {}).get("labels") or {}
    info = (node.get("status") or {}).get("nodeInfo") or {}
    os_name = labels.get("kubernetes.io/os") or info.get("operatingSystem")
    arch = labels.get("kubernetes.io/arch") or info.get("architecture")
    return f"{os_name}/{arch}" if os_name and arch else None


def gpu_item(node: Obj) -> AcceleratorItem | None:
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    if labels.get(GFD_PRESENT) != "true" and _quantity(allocatable.get(GPU_RESOURCE)) <= 0:
        return None
    memory = labels.get(GFD_MEMORY, "")
    sharing = labels.get(GFD_SHARING, "none")
    shared = sharing in ("time-slicing", "mps")
    return AcceleratorItem(
        id=f"{meta.get('name')}/nvidia",
        kind="gpu",
        vendor="nvidia",
        model=labels.get(GFD_PRODUCT, ""),
        apis=("cuda",),
        memory_bytes=int(memory) * _MIB if memory.isdigit() else None,
        memory_kind="dedicated",
        memory_enforced=not shared,
        share_mode="time_sliced" if shared else "exclusive",
    )


def capacity(nodes: list[Obj], pods: list[Obj]) -> dict[str, Any]:
    """The heartbeat's `capacity` object for these Nodes and Pods."""
    used: dict[str, dict[str, Decimal]] = {}
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        bucket = used.setdefault(node_name, {})
        for resource, amount in _requests(pod).items():
            bucket[resource] = bucket.get(resource, Decimal(0)) + amount
    units: list[Obj] = []
    items: list[AcceleratorItem] = []
    for node in sorted(nodes, key=lambda n: (n.get("metadata") or {}).get("name") or ""):
        name = (node.get("metadata") or {}).get("name")
        if not name:
            continue
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        ready = _ready(node)
        taken = used.get(name, {})

        def amounts(
            resource: str,
            scale: int,
            node_alloc: Obj = allocatable,
            node_taken: dict[str, Decimal] = taken,
            schedulable: bool = ready,
        ) -> dict[str, int]:
            total = int(_quantity(node_alloc.get(resource)) * scale)
            free = max(0, total - int(node_taken.get(resource, Decimal(0)) * scale)) if schedulable else 0
            return {"allocatable": total, "free": free}

        unit: Obj = {
            "id": name,
            "cpu_milli": amounts("cpu", 1000),
            "memory_bytes": amounts("memory", 1),
            "accelerators": [],
        }
        item = gpu_item(node)
        if item is not None:
            items.append(item)
            unit["accelerators"].append({"inventory_id": item.id, **amounts(GPU_RESOURCE, 1)})
        units.append(unit)
    return {"placement_units": units, "accelerators": [i.to_wire() for i in items]}


def models_by_inventory_id(capacity_report: dict[str, Any]) -> dict[str, str]:
    """inventory id -> GFD product, for the renderer's product constraint."""
    return {a["id"]: a.get("model") or "" for a in capacity_report.get("accelerators", [])}
