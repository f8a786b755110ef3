"""Accelerator claims, release, policy refusals, the usage ledger and the budget beat task, on PostgreSQL."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from apps.accelerators import services, tasks
from apps.accelerators.models import AcceleratorClaim, AcceleratorEntitlement, AcceleratorUsage
from apps.core.errors import ForestError
from apps.flags import services as flags
from apps.pipelines.rules import node_requirement
from tests.factories import apple_gpu, entitlement, nvidia_gpu, unit

pytestmark = pytest.mark.django_db
POLICY = "host.accelerators.policy"


def gpu_grove(make_grove, name="gpu", gpus=1, free=None):
    devices = [nvidia_gpu(f"GPU-{i}") for i in range(gpus)]
    slots = [{"inventory_id": d["id"], "allocatable": 1, "free": 1 if free is None else free} for d in devices]
    return make_grove(name, roles=("compute",), units=[unit("node-1", accelerators=slots)], accelerators=devices)


def wants(count=1, vendor="nvidia", **extra):
    return node_requirement({"id": "t", "kind": "exec", "accelerators": {"count": count,
                                                                                        "vendor": vendor, **extra}},
                                           run_kind="compute")


def test_no_accelerators_requested_claims_nothing(make_grove):
    grove = gpu_grove(make_grove)
    plain = node_requirement({"id": "t", "kind": "exec"}, run_kind="compute")
    assert services.accelerator_claim(grove=grove, requirement=plain, job_ref="j1", team=None) is None
    assert not AcceleratorClaim.objects.exists()


def test_claim_takes_free_units_and_release_returns_them(make_grove):
    grove = gpu_grove(make_grove, gpus=2)
    first = services.accelerator_claim(grove=grove, requirement=wants(), job_ref="j1", team="ml")
    assert (first.unit_id, first.allocations, first.api, first.vendor) == ("node-1", [{"inventory_id": "GPU-0",
                                                                                        "count": 1}], "cuda", "nvidia")
    assert services.accelerator_claim(grove=grove, requirement=wants(), job_ref="j1", team="ml") == first
    second = services.accelerator_claim(grove=grove, requirement=wants(), job_ref="j2", team="ml")
    assert second.allocations == [{"inventory_id": "GPU-1", "count": 1}]
    with pytest.raises(ForestError) as exc:
        services.accelerator_claim(grove=grove, requirement=wants(), job_ref="j3", team="ml")
    assert exc.value.code == "accelerator_unavailable" and exc.value.status == 409
    assert exc.value.extra["reasons"][0]["code"] == "accelerator_unavailable"
    released = services.accelerator_release(job_ref="j1")
    assert released.state == "released" and released.ended_at is not None
    assert services.accelerator_release(job_ref="j1") is None  # idempotent
    assert services.accelerator_claim(grove=grove, requirement=wants(), job_ref="j3", team="ml").allocations == [
        {"inventory_id": "GPU-0", "count": 1}]


def test_wrong_api_is_refused_with_its_reason(make_grove):
    grove = gpu_grove(make_grove)
    with pytest.raises(ForestError) as exc:
        services.accelerator_claim(grove=grove, requirement=wants(vendor="apple"), job_ref="j", team=None)
    assert exc.value.code == "accelerator_unavailable"
    assert {r["code"] for r in exc.value.extra["reasons"]} == {"accelerator_api_mismatch",
                                                               "accelerator_vendor_mismatch"}


def test_apple_claim_is_cooperative_and_serialised(make_grove):
    device = apple_gpu()
    mac = make_grove("mac", substrate="native", roles=("compute",), platforms=("darwin/arm64",),
                     units=[unit("machine", accelerators=[{"inventory_id": device["id"], "allocatable": 1,
                                                           "free": 1}])], accelerators=[device])
    claim = services.accelerator_claim(grove=mac, requirement=wants(vendor="apple", min_memory_bytes=32 << 30),
                                       job_ref="mlx", team=None)
    assert claim.cooperative and claim.api == "metal"
    with pytest.raises(ForestError):
        services.accelerator_claim(grove=mac, requirement=wants(vendor="apple"), job_ref="mlx2", team=None)


def test_policy_off_needs_no_entitlement_policy_on_refuses_with_codes(make_grove):
    grove = gpu_grove(make_grove, gpus=3)
    assert services.accelerator_claim(grove=grove, requirement=wants(), job_ref="free", team=None)
    services.accelerator_release(job_ref="free")
    flags.flag_override_set(name=POLICY, enabled=True, reason="t")
    for team in (None, "ml"):
        with pytest.raises(ForestError) as exc:
            services.accelerator_claim(grove=grove, requirement=wants(), job_ref="j", team=team)
        assert exc.value.code == "not_entitled" and exc.value.status == 403
    entitlement(team="ml", api="cuda", max_concurrent=2, budget_accelerator_seconds=3600)
    entitlement(team="ml", api="metal", max_concurrent=0)  # another api does not apply
    services.accelerator_claim(grove=grove, requirement=wants(), job_ref="j1", team="ml")
    with pytest.raises(ForestError) as exc:
        services.accelerator_claim(grove=grove, requirement=wants(count=2), job_ref="j2", team="ml")
    assert exc.value.code == "over_concurrency" and exc.value.extra["in_use"] == 1
    services.accelerator_release(job_ref="j1")
    # the ledger says the month's budget is spent
    AcceleratorUsage.objects.filter(claim__job_ref="j1").update(accelerator_ms=3600 * 1000)
    with pytest.raises(ForestError) as exc:
        services.accelerator_claim(grove=grove, requirement=wants(), job_ref="j3", team="ml")
    assert exc.value.code == "over_budget"


def test_accrual_is_idempotent_and_splits_late_runs_by_day(make_grove):
    grove = gpu_grove(make_grove, gpus=2)
    claim = services.accelerator_claim(grove=grove, requirement=wants(count=2), job_ref="j", team="ml")
    start = datetime(2026, 11, 30, 23, 0, tzinfo=UTC)
    AcceleratorClaim.objects.filter(pk=claim.pk).update(started_at=start, accrued_through=start)
    late = datetime(2026, 12, 1, 0, 30, tzinfo=UTC)  # the task missed runs: one call covers the gap
    assert services.accelerator_usage_accrue(now=late)["accrued_ms"] == 2 * 5400 * 1000
    assert services.accelerator_usage_accrue(now=late)["accrued_ms"] == 0  # ran twice: nothing more
    by_day = dict(AcceleratorUsage.objects.values_list("day", "accelerator_ms"))
    assert by_day == {start.date(): 2 * 3600 * 1000, late.date(): 2 * 1800 * 1000}
    services.accelerator_usage_accrue(now=late + timedelta(seconds=10))
    assert sum(AcceleratorUsage.objects.values_list("accelerator_ms", flat=True)) == 2 * 5410 * 1000


@pytest.fixture
def cancelled(monkeypatch):
    """Records the Grove-job cancellations the budget task asks dispatch for (the claims here have no real
    job behind them). The claim/ledger side is all real."""
    calls: list[dict] = []
    monkeypatch.setattr(services, "grove_job_cancel", lambda **kwargs: calls.append(kwargs) or True)
    return calls


def test_budget_task_cancels_jobs_once_with_a_recorded_reason(make_grove, cancelled):
    flags.flag_override_set(name=POLICY, enabled=True, reason="t")
    entitlement(team="ml", api="cuda", budget_accelerator_seconds=600, period="day")
    entitlement(team="other", budget_accelerator_seconds=10 ** 9)
    grove = gpu_grove(make_grove, gpus=2)
    ml = services.accelerator_claim(grove=grove, requirement=wants(), job_ref="job-ml", team="ml")
    other = services.accelerator_claim(grove=grove, requirement=wants(), job_ref="job-other", team="other")
    # Midday: a per-day budget resets at midnight UTC, so the accrual window must not straddle one.
    now = timezone.now().replace(hour=12, minute=0, second=0, microsecond=0)
    AcceleratorClaim.objects.filter(pk__in=[ml.pk, other.pk]).update(accrued_through=now - timedelta(seconds=300))
    assert services.accelerator_usage_accrue(now=now)["revoked"] == []  # 300 s of 600: still fine
    result = services.accelerator_usage_accrue(now=now + timedelta(seconds=301))
    assert result["revoked"] == ["job-ml"]
    assert cancelled == [{"job_id": "job-ml", "reason": "accelerator_budget_exhausted"}]
    ml.refresh_from_db()
    assert (ml.state, ml.end_reason) == ("revoked", "accelerator_budget_exhausted")
    assert AcceleratorClaim.objects.get(pk=other.pk).state == "active"
    used = sum(AcceleratorUsage.objects.filter(team="ml").values_list("accelerator_ms", flat=True))
    assert used == 601 * 1000
    again = services.accelerator_usage_accrue(now=now + timedelta(seconds=400))  # runs twice / late
    assert again["revoked"] == [] and len(cancelled) == 1
    assert sum(AcceleratorUsage.objects.filter(team="ml").values_list("accelerator_ms", flat=True)) == used
    assert services.accelerator_release(job_ref="job-ml") is None  # the job's terminal report is a no-op
    with pytest.raises(ForestError) as exc:
        services.accelerator_claim(grove=grove, requirement=wants(), job_ref="job-ml-2", team="ml")
    assert exc.value.code == "over_budget"


def test_budget_task_without_the_flag_only_accrues(make_grove, cancelled):
    entitlement(team="ml", budget_accelerator_seconds=1)
    grove = gpu_grove(make_grove)
    claim = services.accelerator_claim(grove=grove, requirement=wants(), job_ref="j", team="ml")
    AcceleratorClaim.objects.filter(pk=claim.pk).update(accrued_through=timezone.now() - timedelta(seconds=100))
    assert tasks.accrue_usage()["revoked"] == 0
    assert AcceleratorClaim.objects.get(pk=claim.pk).state == "active" and not cancelled


def test_entitlement_validation():
    """Staff set entitlements in the admin, which validates the model: a known period, no negative budget
    (the check constraint, which also holds the table)."""
    with pytest.raises(ValidationError) as exc:
        entitlement(team="ml", period="fortnight")
    assert "period" in exc.value.message_dict
    with pytest.raises(ValidationError, match="accelerator_budget_non_negative"):
        entitlement(team="ml", budget_accelerator_seconds=-1)
    assert not AcceleratorEntitlement.objects.exists()


def test_claim_state_machine_refuses_illegal_transitions(make_grove):
    grove = gpu_grove(make_grove)
    claim = services.accelerator_claim(grove=grove, requirement=wants(), job_ref="j", team=None)
    services.accelerator_release(job_ref="j")
    claim.refresh_from_db()
    with pytest.raises(ForestError) as exc:
        services.claim_transition(claim=claim, to="revoked", reason="x", at=timezone.now())
    assert exc.value.code == "illegal_claim_transition"


@pytest.mark.parametrize("path", ["/admin/accelerators/acceleratorentitlement/",
                                  "/admin/accelerators/acceleratorclaim/", "/admin/accelerators/acceleratorusage/",
                                  "/admin/placement/executionplacement/"])
def test_admin_pages_render(client, make_grove, path):
    from django.contrib.auth import get_user_model

    admin = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(admin)
    grove = gpu_grove(make_grove)
    entitlement(team="ml", api="cuda", max_concurrent=1)
    claim = services.accelerator_claim(grove=grove, requirement=wants(), job_ref="j", team="ml")
    services.accelerator_release(job_ref="j")
    response = client.get(path)
    assert response.status_code == 200
    if "claim" in path:
        assert client.get(f"{path}{claim.pk}/change/").status_code == 200
