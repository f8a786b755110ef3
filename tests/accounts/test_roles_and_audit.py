"""Roles exist after migrate and are granted by command or in the admin; staff writes are audited with the
request id and are queryable in the admin; secret values never reach the audit trail."""
from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.management.base import CommandError

from apps.accelerators.models import AcceleratorEntitlement
from apps.accounts import roles
from apps.accounts.models import AuditEvent, Team
from tests.estate import PREVIEW, client_for, compute_body
from tests.factories import UserFactory, grant

pytestmark = pytest.mark.django_db
V1 = "/api/forest/v1"


def test_the_roles_hold_exactly_their_permissions():
    for name, perms in roles.ROLES.items():
        group = Group.objects.get(name=name)
        held = {f"{p.content_type.app_label}.{p.codename}" for p in group.permissions.select_related("content_type")}
        assert held == set(perms), name


def test_roles_and_teams_commands_grant_and_revoke(db):
    user = UserFactory(username="dana", is_staff=False)
    call_command("roles", "grant", "dana", roles.SUBMITTER, stdout=StringIO())
    call_command("teams", "add", "ml", "dana", stdout=StringIO())
    user.refresh_from_db()
    assert user.is_staff and user.has_perm("compute.add_computejob")
    assert not user.has_perm("workloads.add_nativeworkload")
    assert list(Team.objects.get(slug="ml").members.all()) == [user]
    call_command("roles", "revoke", "dana", roles.SUBMITTER, stdout=StringIO())
    user = type(user).objects.get(pk=user.pk)
    assert not user.has_perm("compute.add_computejob")
    listing = StringIO()
    call_command("roles", "list", stdout=listing)
    assert "workload operator" in listing.getvalue() and "workloads.add_workloadsecret" in listing.getvalue()
    assert [e.action for e in AuditEvent.objects.order_by("id")] == ["role.grant", "team.member_add", "role.revoke"]
    with pytest.raises(CommandError, match="invalid_team"):
        call_command("teams", "add", "Not A Slug", "dana", stdout=StringIO())
    with pytest.raises(CommandError, match="user_not_found"):
        call_command("roles", "grant", "nobody", roles.VIEWER, stdout=StringIO())
    call_command("roles", "sync", stdout=StringIO())  # idempotent
    test_the_roles_hold_exactly_their_permissions()


def test_staff_writes_are_audited_with_the_request_id(users, estate, staff_client):
    response = staff_client.post(f"{V1}/compute/jobs", compute_body("blue", "audited"), format="json",
                                 HTTP_X_REQUEST_ID="req-42")
    assert response.status_code == 201 and response["X-Request-ID"] == "req-42"
    job_id = response.json()["id"]
    staff_client.post(f"{V1}/compute/jobs/{job_id}/cancel", format="json", HTTP_X_REQUEST_ID="req-43")
    staff_client.post(f"{V1}/workloads/secrets", {"name": "API_TOKEN", "value": "hunter2-secret"}, format="json")
    placement = estate["red"]["placement"]
    staff_client.post(f"{V1}/placements/{placement.pk}/replace", {"reason": "moving"}, format="json")
    events = {e.action: e for e in AuditEvent.objects.filter(via="api")}
    submit = events["compute-job-create"]
    assert submit.actor.username == "staff" and submit.request_id == "req-42" and submit.target_id == job_id
    assert submit.token is not None and submit.team == "blue"
    cancel = events["compute-job-cancel"]
    assert cancel.request_id == "req-43" and cancel.target_id == job_id
    assert "hunter2" not in repr(events["workload-secret"].detail)
    assert events["placement-replace"].target_id == str(placement.pk)
    # A hostile request id is replaced by a fresh one rather than stored.
    bad = staff_client.get(f"{V1}/groves", HTTP_X_REQUEST_ID="x" * 500)
    assert len(bad["X-Request-ID"]) == 32


def test_reads_and_refusals_are_not_audited(users, estate):
    viewer = client_for(users["viewer"])
    count = AuditEvent.objects.count()
    viewer.get(f"{V1}/compute/jobs")
    viewer.post(f"{V1}/compute/jobs", compute_body("red"), format="json")
    preview = viewer.post(f"{V1}/placements/preview", PREVIEW, format="json")
    assert preview.status_code == 200  # a POST that stores nothing is not a write
    assert AuditEvent.objects.count() == count


def test_admin_grants_roles_and_teams_and_audits_entitlements(client, django_user_model):
    root = django_user_model.objects.create_superuser("root", "root@example.com", "pw-123456789")
    client.force_login(root)
    user = UserFactory(username="erin", is_staff=False)
    page = client.get(f"/admin/auth/user/{user.pk}/change/")
    assert page.status_code == 200 and b"workload operator" in page.content  # the roles are the groups offered
    response = client.post("/admin/accounts/team/add/", {"slug": "ml", "name": "ML", "members": [user.pk]},
                           HTTP_X_REQUEST_ID="admin-1")
    assert response.status_code == 302, response.content[:500]
    assert list(Team.objects.get(slug="ml").members.all()) == [user]
    response = client.post("/admin/accelerators/acceleratorentitlement/add/",
                           {"team": "ml", "api": "cuda", "vendor": "", "max_concurrent": "2",
                            "budget_accelerator_seconds": "3600", "period": "month", "note": ""},
                           HTTP_X_REQUEST_ID="admin-2")
    assert response.status_code == 302, response.content[:500]
    entitlement = AcceleratorEntitlement.objects.get(team="ml")
    event = AuditEvent.objects.get(action="acceleratorentitlement.add")
    assert event.via == "admin" and event.request_id == "admin-2" and event.team == "ml"
    assert event.target_id == str(entitlement.pk) and "max_concurrent" in event.detail["changed"]
    assert AuditEvent.objects.filter(action="team.add", request_id="admin-1").exists()
    listing = client.get("/admin/accounts/auditevent/", {"q": "admin-2"})
    assert listing.status_code == 200 and b"acceleratorentitlement.add" in listing.content
    assert b"admin-2" in listing.content and b"admin-1" not in listing.content


def test_a_staff_admin_grants_roles_in_admin_but_cannot_make_superusers(client):
    admin_user = grant(UserFactory(username="ops", is_staff=False), roles.STAFF_ADMIN)
    target = UserFactory(username="frank", is_staff=False)
    client.force_login(admin_user)
    page = client.get(f"/admin/auth/user/{target.pk}/change/")
    assert page.status_code == 200
    assert b'name="groups"' in page.content and b'name="is_superuser"' not in page.content
    submitter = Group.objects.get(name=roles.SUBMITTER)
    form = {"username": "frank", "password": target.password, "is_active": "on", "is_staff": "on",
            "groups": [submitter.pk], "date_joined_0": "2026-01-01", "date_joined_1": "00:00:00",
            "is_superuser": "on"}
    response = client.post(f"/admin/auth/user/{target.pk}/change/", form, HTTP_X_REQUEST_ID="grant-1")
    assert response.status_code == 302, response.content[:800]
    target.refresh_from_db()
    assert not target.is_superuser and list(target.groups.values_list("name", flat=True)) == [roles.SUBMITTER]
    event = AuditEvent.objects.get(action="user.roles")
    assert event.actor == admin_user and event.request_id == "grant-1" and event.detail["granted"] == [roles.SUBMITTER]
