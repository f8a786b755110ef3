"""Staff pages in a real browser (Debian's Chromium, headless, against a live Host on PostgreSQL): htmx
swaps tables in place and pushes shareable URLs, placement "why not" verdicts, cancelling a run with its
confirmation, and toggling a flag in admin with a reason. Screenshots of each page go to
``FOREST_SCREENSHOTS_DIR`` (the README's are made with ``docs/screenshots``), else to a temporary folder."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

from apps.accelerators.models import AcceleratorEntitlement
from apps.flags.models import FlagAudit
from apps.flags.registry import FLAGS
from apps.flags.selectors import is_enabled
from apps.flags.services import flag_override_set
from apps.groves.models import Grove
from apps.pipelines import services as pipelines
from apps.pipelines.models import PipelineNode, PipelineRun
from apps.placement.models import ExecutionPlacement
from tests.pipelines.graphs import exec_node, graph

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]
FLAG = "host.staff.execution_observability"


@pytest.fixture
def shots(tmp_path) -> Path:
    folder = Path(os.environ.get("FOREST_SCREENSHOTS_DIR") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _login(page, live_server, django_user_model, next_url="/staff/groves/"):
    django_user_model.objects.create_superuser("operator", "op@example.com", "correct-horse-battery")
    page.goto(f"{live_server.url}/admin/login/?next={next_url}")
    page.fill("#id_username", "operator")
    page.fill("#id_password", "correct-horse-battery")
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}{next_url}")


def _estate() -> PipelineRun:
    """The demo Groves, a compute run (one node placed by selection, one pinned to the Mac: would refuse)."""
    call_command("load_demo")
    # As if each demo Grove had an agent polling for its work (the demo's own Groves never poll, so are never
    # ready: tests/placement/test_readiness.py); the pages below show placements made on a ready fleet.
    Grove.objects.update(last_polled_at=timezone.now())
    flag_override_set(name=FLAG, enabled=True, reason="browser test")
    AcceleratorEntitlement.objects.create(team="ml", api="cuda", max_concurrent=4, budget_accelerator_seconds=36000)
    run = None
    for team in ("ml", "web"):
        run = pipelines.pipeline_run_create(
            graph=graph(exec_node("prepare"), exec_node("train", needs=["prepare"]),
                        exec_node("render", grove="mac-studio-1")), kind="compute", team=team)
        for node in PipelineNode.objects.filter(run=run, status="queued"):
            pipelines.pipeline_node_execute(node_id=node.pk)
    return run


def test_inventory_filters_swap_the_table_and_push_the_url(live_server, browser_page, django_user_model, shots):
    call_command("load_demo")
    flag_override_set(name=FLAG, enabled=True, reason="browser test")
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
    assert rows.count("simulated") == 2 and rows.count("not polling") == 2  # the demo's Groves say what they are
    assert "unified (not enforced)" in rows
    page.screenshot(path=os.environ.get("FOREST_SCREENSHOT_STAFF", str(shots / "groves.png")), full_page=True)
    page.reload()  # the pushed URL is shareable: the filter survives a reload
    assert page.locator("#groves-table tbody tr").count() == 2
    page.focus("select[name=role]")  # keyboard only: a labelled control, changed with the arrow key
    page.keyboard.press("ArrowDown")
    page.wait_for_url("**role=build**")
    assert page.locator("#groves-table tbody").inner_text().count("mac-studio-1") == 1
    page.goto(f"{live_server.url}/staff/groves/?substrate=native")
    page.click("text=mac-studio-1")
    page.wait_for_selector("text=Accelerator inventory")
    assert page.locator("text=Apple M2 Ultra").count() >= 1
    page.screenshot(path=str(shots / "grove-detail.png"), full_page=True)


def test_placements_filter_sort_and_why_not(live_server, browser_page, django_user_model, shots):
    _estate()
    page = browser_page
    _login(page, live_server, django_user_model, "/staff/placements/")
    total = ExecutionPlacement.objects.count()
    assert page.locator("#placements-table tbody tr").count() == total
    page.screenshot(path=str(shots / "placements.png"), full_page=True)
    page.evaluate("window.__marker = 'same document'")
    page.select_option("select[name=would_refuse]", "true")
    page.wait_for_function("document.querySelectorAll('#placements-table tbody tr').length === 2")
    assert "would_refuse=true" in page.url and page.evaluate("window.__marker") == "same document"
    page.click("#placements-table th >> text=When")  # a sort link, boosted: swapped in place too
    page.wait_for_url("**sort=created_at**")
    assert page.evaluate("window.__marker") == "same document" and "would_refuse=true" in page.url
    page.select_option("select[name=chooser]", "")
    page.fill("input[name=platform]", "")
    page.goto(f"{live_server.url}/staff/placements/?substrate=x&would_refuse=perhaps")
    assert page.locator("#filter-errors").is_visible() and "perhaps" in page.locator("#filter-errors").inner_text()
    page.goto(f"{live_server.url}/staff/placements/?would_refuse=true")
    page.locator("#placements-table tbody tr a", has_text="node render").first.click()
    page.wait_for_selector("#candidates")
    assert "/staff/placements/" in page.url and page.locator("main").count() == 1  # a page of its own
    text = page.locator("main").inner_text()
    shadow = ExecutionPlacement.objects.filter(would_refuse=True).first()
    assert all(item["code"] in text for item in shadow.decision["incompatibilities"])
    assert "would refuse" in text and "Why not the other Groves" in text
    page.screenshot(path=str(shots / "placement-detail.png"), full_page=True)
    # "Why not" is read where the page shows it: each reason wholly inside the window at common widths.
    detail = page.url
    for width in (1280, 1920):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(detail)
        assert page.locator("#candidates .why-not-reasons").count() >= 1
        # The text itself (a Range over it, not its box: text can overflow a box), inside the window and inside
        # the table's scroll box as first shown (a cell past its right edge is scrolled out of sight).
        extents = page.evaluate("""() => [...document.querySelectorAll('#candidates .why-not-reasons')].map(el => {
            const range = document.createRange(); range.selectNodeContents(el);
            const text = range.getBoundingClientRect();
            const box = el.closest('.table-container').getBoundingClientRect();
            return {left: text.left, right: text.right, boxLeft: box.left, boxRight: box.right,
                    shown: text.width > 0 && text.height > 0};
        })""")
        for extent in extents:
            assert extent["shown"] and extent["left"] >= 0 and extent["right"] <= width, (width, extent)
            assert extent["boxLeft"] <= extent["left"] and extent["right"] <= extent["boxRight"], (width, extent)
        codes = page.locator("#candidates .why-not-reasons code").all_inner_texts()
        assert set(codes) >= {item["code"] for item in shadow.decision["candidates"][0]["incompatibilities"]}
    page.goto(f"{live_server.url}/staff/refusals/")
    assert page.locator("#refusal-total").inner_text() == "2" and page.locator("svg.trend rect.bar").count() == 14
    page.screenshot(path=str(shots / "would-refuse.png"), full_page=True)
    for name, url in (("accelerators", "/staff/inventory/"), ("status", "/staff/status/"), ("runs", "/staff/runs/")):
        page.goto(f"{live_server.url}{url}")
        page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
    # Legible in a narrow window: the page itself never scrolls sideways (wide tables scroll in their box).
    page.set_viewport_size({"width": 420, "height": 900})
    for url in ("/staff/placements/", "/staff/groves/", "/staff/refusals/", "/staff/runs/", "/staff/compute/"):
        page.goto(f"{live_server.url}{url}")
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"), url


def test_cancel_a_run_with_confirmation(live_server, browser_page, django_user_model, shots):
    run = _estate()
    page = browser_page
    _login(page, live_server, django_user_model, f"/staff/runs/{run.id}/")
    assert page.locator("#run-status").inner_text() == "running"
    page.screenshot(path=str(shots / "run-detail.png"), full_page=True)
    page.once("dialog", lambda dialog: dialog.dismiss())  # "No": nothing happens
    page.click("#cancel-run")
    assert PipelineRun.objects.get(pk=run.id).status == "running"
    page.fill("#id_reason", "wrong dataset")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#cancel-run")
    page.wait_for_selector("text=cancelled: its live Grove jobs were asked to stop")
    assert page.locator("#run-status").inner_text() == "cancelled"
    assert page.locator("#cancel-run").count() == 0
    run.refresh_from_db()
    assert run.status == "cancelled" and run.reason == "wrong dataset"


def test_every_declared_flag_toggles_from_its_own_admin_page(live_server, browser_page, django_user_model, shots):
    """Each flag's page is reached the way a person reaches it (the list's link, so admin's quoted id:
    ``_`` is ``_5F`` in the URL), asks for a reason before anything changes, applies, and lists the change."""
    page = browser_page
    _login(page, live_server, django_user_model, "/admin/flags/flag/")
    for number, (name, definition) in enumerate(FLAGS.items()):
        page.goto(f"{live_server.url}/admin/flags/flag/")
        page.locator("#result_list a", has_text=name).first.click()
        page.wait_for_selector("#flag-toggle")
        assert page.locator("input[name=_save]").count() == 0  # a read-only mirror: no Save button
        target = "off" if definition.default else "on"
        page.select_option("#toggle select[name=value]", target)
        page.click("#flag-toggle")  # no reason yet: the browser asks for one and nothing is posted
        prompt = page.locator("#toggle textarea[name=reason]").evaluate("field => field.validationMessage")
        assert prompt and FlagAudit.objects.filter(flag_id=name).count() == 0, name
        reason = f"drill {number}: flip {name}"
        page.fill("#toggle textarea[name=reason]", reason)
        page.click("#flag-toggle")
        page.wait_for_selector("text=the change is audited")
        assert page.locator("#flag-toggle").count() == 1, f"{name}: the toggle did not return to the flag's page"
        assert page.locator("tr", has_text=reason).count() >= 1, name  # the audit list shows it
        assert is_enabled(name) is (target == "on"), name
    assert FlagAudit.objects.count() == len(FLAGS)


def test_toggle_a_flag_in_admin_with_a_reason(live_server, browser_page, django_user_model, shots):
    page = browser_page
    name = "host.deploy.forest_compatibility"
    _login(page, live_server, django_user_model, "/admin/flags/flag/")
    page.locator("#result_list a", has_text=name).first.click()
    page.wait_for_selector("#flag-toggle")
    assert page.locator("input[name=_save]").count() == 0  # a read-only mirror: no Save button
    page.select_option("#toggle select[name=value]", "on")
    page.fill("#toggle textarea[name=reason]", "pilot: refuse before dispatch on staging")
    page.select_option("#toggle select[name=scope]", "environment")
    page.fill("#toggle input[name=scope_value]", "staging")
    page.click("#flag-toggle")
    page.wait_for_selector("text=the change is audited")
    audit = page.locator("tr", has_text="pilot: refuse before dispatch on staging")
    assert audit.count() >= 1 and "staging" in audit.first.inner_text()
    page.screenshot(path=str(shots / "admin-flag.png"), full_page=True)
    entry = FlagAudit.objects.get()
    assert entry.actor.username == "operator" and entry.scope_value == "staging" and entry.new_value is True
    page.goto(f"{live_server.url}/admin/flags/flag/")
    assert "pilot: refuse before dispatch on staging" in page.locator("tr", has_text=name).inner_text()
