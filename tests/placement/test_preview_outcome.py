"""Preview == outcome: ``POST placements/preview`` runs the admission and the scoring dispatch runs
(compatibility, resource fit, accelerators after Host's active claims, every score plugin, the tie-break)
and returns the same outcome, Grove, codes and score breakdown as dispatching the same work does — for a
pipeline node (the single write path) and for a batch item (``POST placements/batch``) — over generated
fleets (units with allocatable/free CPU, memory and GPUs, some GPUs already claimed by Host, operator
preferences, often identical Groves so that ties are common) and generated requirements (hypothesis)."""
from __future__ import annotations

import uuid

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from apps.accelerators.models import AcceleratorClaim
from apps.dispatch.models import GroveJob
from apps.groves.models import AcceleratorInventoryItem, Grove, GroveCapability, PlacementUnit
from apps.pipelines import services as pipelines
from apps.pipelines.models import PipelineNode, PipelineRun
from apps.placement import snapshot
from apps.placement.models import ExecutionPlacement
from tests.factories import UserFactory, api_token_for
from tests.pipelines.graphs import exec_node, graph

User = get_user_model()

GIB = 1024**3
pytestmark = pytest.mark.django_db


def ci_client() -> APIClient:
    """A user who may place (``placement.add_executionplacement``): CI's batch API."""
    client = APIClient()
    user = User.objects.filter(username="ci").first() or UserFactory(username="ci", is_staff=True, is_superuser=True)
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_for(user, uuid.uuid4().hex)}")
    return client

unit_spec = st.fixed_dictionaries({
    "cpu": st.sampled_from([2, 4, 8]), "cpu_free_pct": st.sampled_from([0, 50, 100]),
    "mem": st.sampled_from([4, 16]), "gpus": st.integers(0, 2), "gpus_free": st.integers(0, 2),
    "claimed": st.integers(0, 1),
})
grove_spec = st.tuples(st.lists(unit_spec, min_size=1, max_size=2), st.sampled_from([50, 50, 100]))
# Often the same Grove several times: equal totals, so the tie-break decides.
fleet_spec = st.one_of(st.lists(grove_spec, min_size=1, max_size=3),
                       st.tuples(grove_spec, st.integers(2, 4)).map(lambda pair: [pair[0]] * pair[1]))
work_spec = st.fixed_dictionaries({"cpu": st.sampled_from([1, 2, 4, 6, 16]), "mem": st.sampled_from([1, 8, 32]),
                                   "gpus": st.integers(0, 3)})


def _load(fleet: list[tuple[list[dict], int]]) -> None:
    GroveJob.objects.all().delete()
    PipelineRun.objects.all().delete()
    ExecutionPlacement.objects.all().delete()
    AcceleratorClaim.objects.all().delete()
    Grove.objects.all().delete()
    now = timezone.now()
    for g, (units, preference) in enumerate(fleet):
        grove = Grove.objects.create(slug=f"g{g}", name=f"g{g}", substrate="kubernetes", roles=["compute"],
                                     platforms=["linux/amd64"], isolation_modes=["container"],
                                     change_kinds=["k8s.job"], last_heartbeat_at=now, capacity_reported_at=now,
                                     placement_preference=preference)
        if any(u["gpus"] for u in units):
            GroveCapability.objects.create(grove=grove, kind="accelerator_api", value="cuda")
        for u, spec in enumerate(units):
            slots = [{"inventory_id": f"u{u}-gpu{i}", "allocatable": 1, "free": int(i < spec["gpus_free"])}
                     for i in range(spec["gpus"])]
            PlacementUnit.objects.create(
                grove=grove, unit_id=f"u{u}", cpu_milli_allocatable=spec["cpu"] * 1000,
                cpu_milli_free=spec["cpu"] * 10 * spec["cpu_free_pct"], memory_bytes_allocatable=spec["mem"] * GIB,
                memory_bytes_free=spec["mem"] * GIB, accelerators=slots)
            for slot in slots:
                AcceleratorInventoryItem.objects.create(
                    grove=grove, inventory_id=slot["inventory_id"], kind="gpu", vendor="nvidia", model="H100",
                    apis=["cuda"], memory_bytes=80 * GIB, memory_kind="dedicated", memory_enforced=True,
                    share_mode="exclusive")
            if spec["claimed"] and slots:  # Host already holds this unit's first GPU for another job
                AcceleratorClaim.objects.create(
                    grove=grove, grove_slug=grove.slug, unit_id=f"u{u}", job_ref=f"other-{g}-{u}", count=1,
                    allocations=[{"inventory_id": slots[0]["inventory_id"], "count": 1}], started_at=now,
                    accrued_through=now)
    snapshot.fleet_refresh(full=True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(fleet=fleet_spec, work=work_spec)
def test_preview_and_dispatch_agree(staff_client, fleet, work):
    """The node's dispatch, and then a batch item on what is left: each previewed first for its subject."""
    _load(fleet)
    node = exec_node("w", reuse="never", resources={"cpu_milli": work["cpu"] * 1000,
                                                    "memory_bytes": work["mem"] * GIB},
                     **({"accelerators": {"count": work["gpus"], "vendor": "nvidia"}} if work["gpus"] else {}))
    run = pipelines.pipeline_run_create(graph=graph(node), kind="compute")
    row = PipelineNode.objects.get(run=run)
    preview = staff_client.post(f"/api/forest/v1/placements/preview?subject_type=pipeline_node&subject_id={row.pk}"
                                f"&group=run:{run.pk}", row.requirement, format="json")
    assert preview.status_code == 200, preview.json()
    seen = preview.json()
    pipelines.pipeline_node_execute(node_id=row.pk)
    row.refresh_from_db()
    if seen["outcome"] == "placed":
        assert row.status == "awaiting", (seen, row.reason, row.detail)
        assert row.grove.slug == seen["selected"]["grove_slug"]
        stored = ExecutionPlacement.objects.get(subject_id=str(row.pk)).decision
        assert stored["scores"] == seen["scores"]
        assert [c.get("score") for c in stored["candidates"]] == [c.get("score") for c in seen["candidates"]]
    elif seen["outcome"] == "waiting":
        assert (row.status, row.reason) == ("waiting", "waiting_for_capacity"), (seen, row.detail)
        assert seen["refusal"]["code"] == "waiting_for_capacity"
        assert sorted(row.capacity_wait.groves.values_list("grove_id", flat=True)) == sorted(
            Grove.objects.filter(pk__in=seen["waiting_for"]).values_list("id", flat=True))
    else:
        assert (row.status, row.reason) == ("failed", seen["refusal"]["code"]), (seen, row.detail)
    stored = ExecutionPlacement.objects.get(subject_id=str(row.pk))
    assert stored.outcome == seen["outcome"]
    # A batch item, previewed for its subject, is placed exactly where and why the preview said.
    preview = staff_client.post("/api/forest/v1/placements/preview?subject_type=compute_step&subject_id=b1",
                                row.requirement, format="json").json()
    placed = ci_client().post("/api/forest/v1/placements/batch", {"items": [
        {"subject_type": "compute_step", "subject_id": "b1", "requirement": row.requirement}]}, format="json")
    assert placed.status_code == 200, placed.content
    result = placed.json()["results"][0]
    if preview["outcome"] == "placed":
        assert result["status"] == "placed" and result["grove_slug"] == preview["selected"]["grove_slug"]
        decision = ExecutionPlacement.objects.get(subject_id="b1").decision
        assert decision["scores"] == preview["scores"]
    elif preview["outcome"] == "waiting":
        assert result["error"]["code"] == "no_capacity"
    else:
        assert result["error"]["code"] == preview["refusal"]["code"]
