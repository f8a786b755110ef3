"""A new user's first visit, in a real browser: log into admin, see the demo Groves with their
inventories, and turn a feature flag on (audited). Chromium against a live Host on PostgreSQL."""
from __future__ import annotations

import os

import pytest
from django.core.management import call_command

from apps.flags.models import FlagAudit
from apps.flags.selectors import is_enabled

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]


def test_admin_demo_groves_and_flag_toggle(live_server, browser_page, django_user_model, tmp_path):
    call_command("load_demo")
    django_user_model.objects.create_superuser("operator", "op@example.com", "correct-horse-battery")
    page = browser_page
    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", "correct-horse-battery")
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}/admin/")

    page.goto(f"{live_server.url}/admin/groves/grove/")
    for slug in ("k8s-build-1", "gpu-box-1", "mac-studio-1"):
        assert page.locator(f"text={slug}").count() >= 1
    page.click("text=mac-studio-1")
    page.wait_for_selector("#accelerators-heading")
    assert page.locator("text=Apple M2 Ultra").count() >= 1
    assert page.locator("text=cooperative").count() >= 1

    page.goto(f"{live_server.url}/admin/flags/flag/")
    row = page.locator("tr", has_text="host.deploy.forest_compatibility")
    assert "off" in row.inner_text()
    row.locator("input[type=checkbox]").check()
    page.select_option("select[name=action]", "turn_on")
    page.fill("input[name=reason]", "pilot agreed in the admin review")
    page.click("button[name=index]")
    page.wait_for_selector("text=the change is audited")
    row = page.locator("tr", has_text="host.deploy.forest_compatibility")
    assert "global" in row.inner_text()
    page.screenshot(path=os.environ.get("FOREST_SCREENSHOT", str(tmp_path / "flags.png")), full_page=True)

    assert is_enabled("host.deploy.forest_compatibility") is True
    audit = FlagAudit.objects.get()
    assert audit.actor.username == "operator" and audit.new_value is True
