"""The flag registry: code defaults, scoped overrides, audit, unknown names, admin and the command."""
from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from apps.core.errors import ValidationFailed
from apps.flags import services
from apps.flags.models import FlagAudit, FlagOverride
from apps.flags.registry import FLAGS, UnknownFlag
from apps.flags.selectors import invalidate, is_enabled, pinned_snapshot, resolve

pytestmark = pytest.mark.django_db

COMPAT = "host.deploy.forest_compatibility"


def test_every_design_flag_is_declared_with_its_default():
    assert {name: flag.default for name, flag in FLAGS.items()} == {
        "host.deploy.forest_compatibility": False,
        "host.deploy.persisted_placement": True,
        "host.pipeline_detached_wait": False,
        "host.deploy.forest_compute_jobs": False,
        "host.accelerators.policy": False,
        "host.deploy.native_ingress": False,
        "host.staff.execution_observability": False,
    }


def test_unknown_flag_raises_instead_of_reading_off():
    with pytest.raises(UnknownFlag, match="not a declared feature flag"):
        is_enabled("host.deploy.forest_compatability")


def test_defaults_apply_without_overrides():
    assert is_enabled(COMPAT) is False
    assert is_enabled("host.deploy.persisted_placement") is True


def test_scope_precedence_team_over_environment_over_global():
    services.flag_override_set(name=COMPAT, enabled=True, reason="global on")
    services.flag_override_set(name=COMPAT, enabled=False, reason="prod off", scope="environment",
                               scope_value="prod")
    services.flag_override_set(name=COMPAT, enabled=True, reason="ml team on", scope="team", scope_value="ml")
    assert resolve(COMPAT) == (True, "global")
    assert resolve(COMPAT, environment="prod") == (False, "environment=prod")
    assert resolve(COMPAT, environment="prod", team="ml") == (True, "team=ml")
    assert resolve(COMPAT, environment="staging") == (True, "global")


def test_every_change_is_audited_with_old_and_new(staff_user):
    services.flag_override_set(name=COMPAT, enabled=True, reason="try it", actor=staff_user)
    services.flag_override_set(name=COMPAT, enabled=False, reason="roll back", actor=staff_user)
    services.flag_override_clear(name=COMPAT, reason="back to default", actor=staff_user)
    rows = list(FlagAudit.objects.order_by("id").values_list("old_value", "new_value", "actor_label", "reason"))
    assert rows == [
        (None, True, "staff", "try it"),
        (True, False, "staff", "roll back"),
        (False, None, "staff", "back to default"),
    ]
    assert is_enabled(COMPAT) is False


def test_reason_is_required_and_nothing_is_written_without_it():
    with pytest.raises(ValidationFailed) as exc:
        services.flag_override_set(name=COMPAT, enabled=True, reason="  ")
    assert exc.value.code == "reason_required"
    assert not FlagOverride.objects.exists()


def test_bad_scopes_are_refused():
    with pytest.raises(ValidationFailed, match="needs the team"):
        services.flag_override_set(name=COMPAT, enabled=True, reason="x", scope="team")
    with pytest.raises(ValidationFailed, match="takes no environment"):
        services.flag_override_set(name=COMPAT, enabled=True, reason="x", scope="global", scope_value="prod")
    with pytest.raises(ValidationFailed) as exc:
        services.flag_override_set(name="nope", enabled=True, reason="x")
    assert exc.value.code == "unknown_flag"


def test_request_pins_one_snapshot(settings):
    settings.FLAGS_CACHE_TTL_S = 0
    with pinned_snapshot():
        assert is_enabled(COMPAT) is False
        FlagOverride.objects.create(flag_id=COMPAT, enabled=True)  # another process's write
        assert is_enabled(COMPAT) is False
    assert is_enabled(COMPAT) is True


def test_process_cache_expires_within_ttl(settings):
    settings.FLAGS_CACHE_TTL_S = 60
    invalidate()
    assert is_enabled(COMPAT) is False
    FlagOverride.objects.create(flag_id=COMPAT, enabled=True)  # written by another process
    assert is_enabled(COMPAT) is False  # still cached
    settings.FLAGS_CACHE_TTL_S = 0
    assert is_enabled(COMPAT) is True


def test_management_command_sets_lists_and_audits(capsys):
    call_command("flags", "set", COMPAT, "on", "--reason", "canary", "--environment", "staging")
    call_command("flags", "list")
    out = capsys.readouterr().out
    assert "environment=staging:on" in out
    assert is_enabled(COMPAT, environment="staging") is True
    audit = FlagAudit.objects.get()
    assert audit.actor_label.startswith("manage.py flags") and audit.reason == "canary"
    call_command("flags", "clear", COMPAT, "--reason", "done", "--environment", "staging")
    assert is_enabled(COMPAT, environment="staging") is False


def test_management_command_refuses_unknown_flag():
    with pytest.raises(CommandError, match="unknown_flag"):
        call_command("flags", "set", "host.nope", "on", "--reason", "x")


def test_admin_lists_default_and_effective_and_toggles_with_audit(client, django_user_model):
    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pw-123456789")
    client.force_login(admin)
    page = client.get("/admin/flags/flag/")
    assert page.status_code == 200
    assert b"effective (global)" in page.content.lower() and b"host.deploy.forest_compatibility" in page.content
    response = client.post("/admin/flags/flag/", {"action": "turn_on", "_selected_action": [COMPAT],
                                                  "reason": "pilot agreed in the admin review"})
    assert response.status_code == 302
    assert is_enabled(COMPAT) is True
    audit = FlagAudit.objects.get()
    assert audit.actor == admin and audit.new_value is True and "admin" in audit.reason


def test_admin_override_form_requires_reason_and_audits(client, django_user_model):
    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pw-123456789")
    client.force_login(admin)
    data = {"flag": COMPAT, "scope": "team", "scope_value": "ml", "enabled": "on"}
    response = client.post("/admin/flags/flagoverride/add/", data)
    assert response.status_code == 200 and b"This field is required" in response.content
    response = client.post("/admin/flags/flagoverride/add/", {**data, "reason": "ml pilot"})
    assert response.status_code == 302
    assert is_enabled(COMPAT, team="ml") is True
    assert FlagAudit.objects.get().reason == "ml pilot"


def test_sync_requests_read_flags_lazily_and_consistently(rf, django_assert_num_queries):
    from django.http import HttpResponse

    from apps.flags.middleware import FlagSnapshotMiddleware

    seen = []

    def quiet_view(request):
        return HttpResponse()

    def flag_view(request):
        seen.append(is_enabled(COMPAT))
        FlagOverride.objects.create(flag_id=COMPAT, enabled=True)  # changed mid-request
        seen.append(is_enabled(COMPAT))
        return HttpResponse()

    with django_assert_num_queries(0):
        FlagSnapshotMiddleware(quiet_view)(rf.get("/"))
    FlagSnapshotMiddleware(flag_view)(rf.get("/"))
    assert seen == [False, False]
    assert is_enabled(COMPAT) is True


def test_admin_list_action_without_a_reason_changes_nothing(client, django_user_model):
    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pw-123456789")
    client.force_login(admin)
    response = client.post("/admin/flags/flag/", {"action": "turn_on", "_selected_action": [COMPAT]}, follow=True)
    assert b"Nothing changed: say why" in response.content
    assert is_enabled(COMPAT) is False and not FlagAudit.objects.exists()


def test_flag_page_has_no_save_button_toggles_with_reason_and_shows_audit(client, django_user_model):
    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pw-123456789")
    client.force_login(admin)
    url = f"/admin/flags/flag/{COMPAT}/change/"
    page = client.get(url).content.decode()
    assert 'name="_save"' not in page and 'name="_continue"' not in page and 'id="flag-toggle"' in page
    toggle = f"/admin/flags/flag/{COMPAT}/toggle/"
    refused = client.post(toggle, {"value": "on", "scope": "global", "scope_value": "", "reason": ""}, follow=True)
    assert b"Nothing changed" in refused.content and is_enabled(COMPAT) is False
    done = client.post(toggle, {"value": "on", "scope": "team", "scope_value": "ml", "reason": "ml pilot week"},
                       follow=True)
    assert done.status_code == 200 and is_enabled(COMPAT, team="ml") is True and is_enabled(COMPAT) is False
    page = done.content.decode()
    assert "audit history" in page.lower() and "ml pilot week" in page
    listing = client.get("/admin/flags/flag/").content.decode()
    assert "team on by root" in listing and "ml pilot week" in listing and "team=ml: on" in listing
    client.post(toggle, {"value": "default", "scope": "team", "scope_value": "ml", "reason": "pilot over"})
    assert is_enabled(COMPAT, team="ml") is False
    assert list(FlagAudit.objects.values_list("reason", flat=True)) == ["pilot over", "ml pilot week"]


@pytest.mark.parametrize("name", sorted(FLAGS))
def test_every_flag_page_links_a_toggle_that_works(client, django_user_model, name):
    """The change page's toggle URL is admin's quoted id (``_5F`` for ``_``); following it must find the flag."""
    import re

    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pw-123456789")
    client.force_login(admin)
    listing = client.get("/admin/flags/flag/").content.decode()
    change_url = re.search(r'href="(/admin/flags/flag/[^"]+/change/)"[^>]*>' + re.escape(name) + "<", listing)[1]
    page = client.get(change_url).content.decode()
    toggle = re.search(r'id="flag-toggle-form" method="post" action="([^"]+)"', page)[1]
    value = "off" if FLAGS[name].default else "on"
    done = client.post(toggle, {"value": value, "scope": "global", "scope_value": "", "reason": "drill"})
    assert done.status_code == 302 and done["Location"] == change_url
    assert is_enabled(name) is (value == "on")
