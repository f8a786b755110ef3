"""Every staff write appears in *Audit events* (``AuditEvent``): flag changes from the admin and from
``manage.py flags``, and every Django admin page that lets a superuser add, change or delete is audited
(``AuditedAdmin``, or its writes go through a service that audits: ``audited_by_service``)."""
from __future__ import annotations

from io import StringIO

import pytest
from django.contrib import admin
from django.core.management import call_command
from django.test import RequestFactory

from apps.accounts.admin import AuditedAdmin
from apps.accounts.models import AuditEvent
from apps.flags.services import flag_override_set

pytestmark = pytest.mark.django_db
FLAG = "host.staff.execution_observability"


def test_every_writable_admin_page_is_audited(django_user_model):
    request = RequestFactory().get("/admin/")
    request.user = django_user_model.objects.create_superuser("root", "root@example.com", "x-Long-pass-1")
    unaudited = []
    for model, model_admin in admin.site._registry.items():
        writes = (model_admin.has_add_permission(request) or model_admin.has_change_permission(request)
                  or model_admin.has_delete_permission(request))
        if writes and not (isinstance(model_admin, AuditedAdmin) or getattr(model_admin, "audited_by_service", False)):
            unaudited.append(model._meta.label)
    assert unaudited == [], "\n".join(unaudited)


def test_a_flag_toggled_in_admin_is_an_audit_event(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("root", "root@example.com", "x-Long-pass-1"))
    response = client.post(f"/admin/flags/flag/{FLAG.replace('_', '_5F')}/toggle/",
                           {"value": "on", "scope": "global", "scope_value": "", "reason": "trying the pages"})
    assert response.status_code == 302
    event = AuditEvent.objects.get(action="flag.override_set")
    assert (event.via, event.actor_label, event.target_type, event.target_id) == ("admin", "root", "flags.flag",
                                                                                 FLAG)
    assert event.detail == {"scope": "global", "scope_value": "", "old": None, "new": True,
                            "reason": "trying the pages"}


def test_flag_changes_by_command_and_clears_are_audit_events():
    call_command("flags", "set", FLAG, "on", "--reason", "rollout", stdout=StringIO())
    call_command("flags", "clear", FLAG, "--reason", "rolled back", stdout=StringIO())
    flag_override_set(name=FLAG, enabled=False, reason="ml only", scope="team", scope_value="ml")
    events = list(AuditEvent.objects.order_by("id").values_list("action", "via", "team"))
    assert events == [("flag.override_set", "command", ""), ("flag.override_clear", "command", ""),
                      ("flag.override_set", "command", "ml")]


def test_an_admin_delete_is_an_audit_event(client, django_user_model):
    from django.contrib.auth.models import Group

    group = Group.objects.create(name="temporary")
    client.force_login(django_user_model.objects.create_superuser("root", "root@example.com", "x-Long-pass-1"))
    response = client.post(f"/admin/auth/group/{group.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302 and not Group.objects.filter(pk=group.pk).exists()
    event = AuditEvent.objects.get(action="group.delete")
    assert (event.via, event.target_type, event.target_id) == ("admin", "auth.group", str(group.pk))
