"""``selectors.inventory_groups`` (one aggregate statement over every unit's accelerator slots and every
inventory item) equals the same groups computed from ORM rows in Python: docs/architecture.md "Fast paths".
Real PostgreSQL."""
from __future__ import annotations

from collections import defaultdict

import pytest

from apps.groves.models import AcceleratorInventoryItem, Grove, PlacementUnit
from apps.staff import selectors
from tests.factories import apple_gpu, nvidia_gpu, unit
from tests.placement.conftest import grove_make

pytestmark = pytest.mark.django_db


def _orm_groups() -> list[selectors.InventoryGroup]:
    slots: dict = defaultdict(lambda: [0, 0])
    for placement_unit in PlacementUnit.objects.all():
        for slot in placement_unit.accelerators:
            entry = slots[(placement_unit.grove_id, slot["inventory_id"])]
            entry[0] += int(slot.get("allocatable") or 0)
            entry[1] += int(slot.get("free") or 0)
    groups: dict = {}
    groves: dict = defaultdict(set)
    for item in AcceleratorInventoryItem.objects.select_related("grove"):
        key = (",".join(item.apis) or "—", item.vendor, item.model, item.memory_bytes, item.memory_kind,
               item.share_mode)
        group = groups.setdefault((*key, item.grove.simulated),
                                  selectors.InventoryGroup(*key, simulated=item.grove.simulated))
        group.items += 1
        groves[(*key, item.grove.simulated)].add(item.grove)
        group.groves = len(groves[(*key, item.grove.simulated)])
        group.groves_not_ready = sum(not grove.ready for grove in groves[(*key, item.grove.simulated)])
        allocatable, free = slots.get((item.grove_id, item.inventory_id), (0, 0))
        group.allocatable += allocatable
        group.free += free
    return sorted(groups.values(), key=lambda g: (g.simulated, g.api, g.vendor, g.model))


def test_the_inventory_statement_equals_its_orm_form():
    assert selectors.inventory_groups() == _orm_groups() == []
    h100 = [nvidia_gpu(f"GPU-{i}") for i in range(3)]
    grove_make("a", roles=("compute",), accelerators=h100, units=[
        unit("u0", accelerators=[{"inventory_id": "GPU-0", "allocatable": 1, "free": 0},
                                 {"inventory_id": "GPU-1", "allocatable": 1, "free": 1}]),
        unit("u1", accelerators=[{"inventory_id": "GPU-2", "allocatable": 1, "free": 1}])])
    grove_make("b", roles=("compute",), accelerators=[nvidia_gpu("GPU-0"), nvidia_gpu("GPU-9", memory_gib=40,
                                                                                     model="NVIDIA A100")],
               units=[unit("u0", accelerators=[{"inventory_id": "GPU-0", "allocatable": 1, "free": 1}])])
    grove_make("mac", substrate="native", roles=("compute",), accelerators=[apple_gpu()],
               units=[unit("m", accelerators=[{"inventory_id": "apple-gpu-0", "allocatable": 4, "free": 3}])])
    grove_make("bare", roles=("compute",))
    groups = selectors.inventory_groups()
    assert groups == _orm_groups()
    assert [(g.api, g.model, g.items, g.groves, g.allocatable, g.free) for g in groups] == [
        ("cuda", "NVIDIA A100", 1, 1, 0, 0), ("cuda", "NVIDIA H100 80GB HBM3", 4, 2, 4, 3),
        ("metal", "Apple M3 Max", 1, 1, 4, 3)]


def test_devices_only_on_simulated_groves_are_grouped_apart_and_not_ready_groves_counted():
    """A demo Grove's devices are never inventory: a model only it reports is a simulated group, and one a real
    Grove also reports keeps the real Grove's counts alone. Groves that are not ready are counted per group."""
    sim = grove_make("demo", roles=("compute",), polled=False, accelerators=[nvidia_gpu("GPU-0"),
                                                                             nvidia_gpu("GPU-1", model="NVIDIA B200")],
                     units=[unit("u0", accelerators=[{"inventory_id": "GPU-0", "allocatable": 1, "free": 1},
                                                     {"inventory_id": "GPU-1", "allocatable": 1, "free": 1}])])
    Grove.objects.filter(pk=sim.pk).update(simulated=True)
    real = grove_make("real", roles=("compute",), accelerators=[nvidia_gpu("GPU-0")],
                      units=[unit("u0", accelerators=[{"inventory_id": "GPU-0", "allocatable": 1, "free": 0}])])
    Grove.objects.filter(pk=real.pk).update(last_polled_at=None)
    groups = selectors.inventory_groups()
    assert groups == _orm_groups()
    assert [(g.model, g.simulated, g.groves, g.groves_not_ready, g.allocatable, g.free) for g in groups] == [
        ("NVIDIA H100 80GB HBM3", False, 1, 1, 1, 0),
        ("NVIDIA B200", True, 1, 1, 1, 1), ("NVIDIA H100 80GB HBM3", True, 1, 1, 1, 1)]


def test_the_code_filter_reads_the_incompatibilities_index():
    """The staff and API ``code`` filter finds exactly the placements whose decision lists the code (or whose
    own code it is), and PostgreSQL answers it from the expression GIN index over the incompatibilities
    (staff migration 0005) — the filter's SQL must be that expression for the index to serve it. Sequential
    scans are switched off so that the planner shows whether the index can serve the query at all (a table
    of five rows would be scanned otherwise)."""
    from django.db import connection

    from apps.placement.filtersets import ExecutionPlacementFilterSet
    from apps.placement.models import ExecutionPlacement

    def incompatibilities(*codes: str) -> dict:
        return {"incompatibilities": [{"code": code, "detail": "x"} for code in codes],
                "top": [{"grove_slug": "g", "score": {"total": 1.0}}]}

    decisions = {"a": incompatibilities("role_missing"), "b": incompatibilities("substrate_mismatch", "role_missing"),
                 "c": incompatibilities(), "d": incompatibilities("platform_mismatch"), "e": {"top": []}}
    for subject, decision in decisions.items():
        ExecutionPlacement.objects.create(subject_type="pipeline_node", subject_id=subject, requirement={},
                                          decision=decision, chooser="selection", enforced=False,
                                          would_refuse=bool(decision.get("incompatibilities")))
    ExecutionPlacement.objects.create(subject_type="pipeline_node", subject_id="f", requirement={}, decision={},
                                      chooser="selection", enforced=True, would_refuse=False, outcome="refused",
                                      code="role_missing")
    queryset = ExecutionPlacementFilterSet({"code": "role_missing"}, ExecutionPlacement.objects.all()).qs
    assert sorted(queryset.values_list("subject_id", flat=True)) == ["a", "b", "f"]
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        plan = queryset.order_by().explain()
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'placement_incompatibilities_gin'")
        (definition,) = cursor.fetchone()
        cursor.execute("SELECT count(*) FROM pg_indexes WHERE indexname = 'placement_decision_gin'")
        (whole,) = cursor.fetchone()
    assert "placement_incompatibilities_gin" in plan and "placement_code" in plan, plan
    assert "((decision -> 'incompatibilities'::text)) jsonb_path_ops" in definition and whole == 0
