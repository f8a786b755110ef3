"""Staff inventory and placements in a real browser: htmx swaps the table in place and pushes the URL."""
from __future__ import annotations

import os

import pytest
from django.core.management import call_command

from apps.flags.services import flag_override_set

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]


def _login(page, live_server, django_user_model):
    django_user_model.objects.create_superuser("operator", "op@example.com", "correct-horse-battery")
    page.goto(f"{live_server.url}/admin/login/?next=/staff/groves/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", "correct-horse-battery")
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}/staff/groves/")


def test_inventory_filters_swap_the_table_and_push_the_url(live_server, browser_page, django_user_model, tmp_path):
    call_command("load_demo")
    flag_override_set(name="host.staff.execution_observability", enabled=True, reason="browser test")
    page = browser_page
    _login(page, live_server, django_user_model)
    assert page.locator("#groves-table tbody tr").count() == 5
    page.evaluate("window.__marker = 'same document'")
    page.select_option("select[name=substrate]", "native")
    page.wait_for_function("document.querySelectorAll('#groves-table tbody tr').length === 2")
    assert "substrate=native" in page.url
    assert page.evaluate("window.__marker") == "same document"  # swapped by htmx, not reloaded
    rows = page.locator("#groves-table tbody").inner_text()
    assert "mac-studio-1" in rows and "gpu-box-1" in rows and "k8s-build-1" not in rows
    assert "unified (not enforced)" in rows
    page.screenshot(path=os.environ.get("FOREST_SCREENSHOT_STAFF", str(tmp_path / "staff.png")), full_page=True)
    page.reload()  # the pushed URL is shareable: the filter survives a reload
    assert page.locator("#groves-table tbody tr").count() == 2
    page.click("text=mac-studio-1")
    page.wait_for_selector("text=Accelerator inventory")
    assert page.locator("text=Apple M2 Ultra").count() >= 1
