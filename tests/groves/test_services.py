"""Enrollment, credentials, heartbeats and staleness through the services, on PostgreSQL."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from apps.core.errors import ForestError
from apps.groves import services
from apps.groves.models import CapacityReport, EnrollmentToken, Grove, GroveCapability, PlacementUnit
from tests.factories import heartbeat_body

pytestmark = pytest.mark.django_db


def test_enrollment_is_one_time_and_roles_come_from_the_token(enroll):
    _, token = services.enrollment_token_create(roles=["build", "compute"], substrate="native")
    body = {"token": token, "name": "Mac Studio", "substrate": "native", "platforms": ["darwin/arm64"]}
    grove, credential = services.grove_enroll(body=body)
    assert grove.roles == ["build", "compute"] and grove.slug == "mac-studio"
    assert credential.startswith("fgc_")
    with pytest.raises(ForestError) as exc:
        services.grove_enroll(body=body)
    assert exc.value.code == "enrollment_token_used"
    assert Grove.objects.count() == 1


def test_expired_and_unknown_tokens_are_refused():
    token, presented = services.enrollment_token_create(roles=["build"], substrate="native")
    EnrollmentToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    body = {"name": "x", "substrate": "native", "platforms": ["linux/amd64"]}
    with pytest.raises(ForestError) as exc:
        services.grove_enroll(body={**body, "token": presented})
    assert exc.value.code == "enrollment_token_expired"
    with pytest.raises(ForestError) as exc:
        services.grove_enroll(body={**body, "token": presented[:-3] + "abc"})
    assert exc.value.code == "enrollment_token_unknown"
    with pytest.raises(ForestError) as exc:
        services.grove_enroll(body={**body, "token": "garbage"})
    assert exc.value.code == "enrollment_token_unknown"
    assert not Grove.objects.exists()


def test_token_substrate_must_match():
    _, presented = services.enrollment_token_create(roles=["build"], substrate="kubernetes")
    with pytest.raises(ForestError) as exc:
        services.grove_enroll(body={"token": presented, "name": "x", "substrate": "native",
                                    "platforms": ["linux/amd64"]})
    assert exc.value.code == "substrate_mismatch"


def test_credentials_are_stored_hashed_and_revocable(enroll):
    grove, credential = enroll()
    stored = grove.credentials.get()
    assert credential.split(".", 1)[1] not in stored.secret_hash
    assert services.grove_authenticate(presented=credential).grove == grove
    services.grove_credential_revoke(credential=stored, reason="laptop stolen")
    with pytest.raises(ForestError) as exc:
        services.grove_authenticate(presented=credential)
    assert exc.value.code == "credential_revoked"


def test_heartbeat_writes_units_inventory_and_capabilities(enroll):
    grove, _ = enroll(roles=("compute",))
    grove = services.grove_heartbeat_record(grove=grove, body=heartbeat_body(gpus=2))
    assert not grove.stale
    assert grove.placement_units.get().accelerators == [
        {"inventory_id": "GPU-0", "allocatable": 1, "free": 1},
        {"inventory_id": "GPU-1", "allocatable": 1, "free": 1},
    ]
    assert sorted(grove.accelerators.values_list("inventory_id", flat=True)) == ["GPU-0", "GPU-1"]
    facts = set(GroveCapability.objects.filter(grove=grove).values_list("kind", "value"))
    assert {("role", "compute"), ("platform", "linux/amd64"), ("change_kind", "native.job"),
            ("isolation", "host_process"), ("accelerator_api", "cuda")} <= facts


def test_unchanged_heartbeat_touches_only_liveness_and_history_is_bounded(enroll, settings,
                                                                           django_assert_max_num_queries):
    settings.GROVE_REPORT_HISTORY = 3
    grove, _ = enroll()
    grove = services.grove_heartbeat_record(grove=grove, body=heartbeat_body())
    with django_assert_max_num_queries(1):  # the hot path is one UPDATE
        services.grove_heartbeat_record(grove=grove, body=heartbeat_body())
    assert CapacityReport.objects.filter(grove=grove).count() == 1
    for gpus in range(1, 6):
        grove = services.grove_heartbeat_record(grove=grove, body=heartbeat_body(gpus=gpus))
    assert CapacityReport.objects.filter(grove=grove).count() == 3
    assert grove.accelerators.count() == 5


def test_bad_heartbeat_changes_nothing(enroll):
    grove, _ = enroll()
    grove = services.grove_heartbeat_record(grove=grove, body=heartbeat_body(gpus=1))
    before = (grove.capacity_digest, PlacementUnit.objects.count())
    body = heartbeat_body(gpus=2)
    body["capacity"]["accelerators"][1]["id"] = "GPU-0"
    with pytest.raises(ForestError) as exc:
        services.grove_heartbeat_record(grove=grove, body=body)
    assert exc.value.code == "duplicate_inventory_id"
    grove.refresh_from_db()
    assert (grove.capacity_digest, PlacementUnit.objects.count()) == before


def test_stale_groves_are_marked_once(enroll, settings):
    settings.GROVE_STALE_AFTER_S = 60
    quiet, _ = enroll(name="quiet")
    quiet = services.grove_heartbeat_record(grove=quiet, body=heartbeat_body())
    Grove.objects.filter(pk=quiet.pk).update(last_heartbeat_at=timezone.now() - timedelta(minutes=5))
    _never, _ = enroll(name="never")
    live, _ = enroll(name="live")
    services.grove_heartbeat_record(grove=live, body=heartbeat_body())
    assert services.grove_stale_mark() == 2
    assert services.grove_stale_mark() == 0
    assert set(Grove.objects.filter(stale_since__isnull=False).values_list("slug", flat=True)) == {"quiet", "never"}
    quiet.refresh_from_db()
    assert quiet.stale
    services.grove_heartbeat_record(grove=quiet, body=heartbeat_body())
    quiet.refresh_from_db()
    assert quiet.stale_since is None and not quiet.stale


def test_stale_task_runs_through_celery_eagerly(enroll, settings):
    from apps.groves.tasks import mark_stale

    enroll(name="never")
    assert mark_stale.apply().get() == 1


def test_create_enrollment_token_prints_token_alone_on_last_line(capsys):
    call_command("create_enrollment_token", "--roles", "build,compute", "--substrate", "native",
                 "--expires-in", "600")
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("fet_") and " " not in out[-1]
    token = EnrollmentToken.objects.get()
    assert token.roles == ["build", "compute"]
    assert 590 < (token.expires_at - timezone.now()).total_seconds() <= 600


def test_demo_load_is_idempotent_and_reports_inventory(capsys):
    call_command("load_demo")
    call_command("load_demo")
    assert Grove.objects.count() == 5
    mac = Grove.objects.get(slug="mac-studio-1")
    item = mac.accelerators.get()
    assert (item.vendor, item.memory_kind, item.memory_enforced, item.share_mode) == (
        "apple", "unified", False, "cooperative")
    assert "admin /" in capsys.readouterr().out


def test_a_refusal_quotes_a_reported_id_with_braces_verbatim(enroll):
    """The refusal's sentence is a template for its field path; a Grove's own id in it (braces included) is
    quoted, never read as part of the template (schemathesis found this as a 500 on the heartbeat)."""
    grove, _ = enroll()
    body = heartbeat_body(gpus=1)
    odd = "GPU-{0}}"
    body["capacity"]["accelerators"][0]["id"] = odd
    unit = body["capacity"]["placement_units"][0]
    unit["accelerators"] = [{**unit["accelerators"][0], "inventory_id": odd}] * 2
    with pytest.raises(ForestError) as exc:
        services.grove_heartbeat_record(grove=grove, body=body)
    assert exc.value.code == "duplicate_inventory_id"
    assert f"'{odd}'" in exc.value.detail
