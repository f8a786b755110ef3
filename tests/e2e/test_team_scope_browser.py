"""A viewer and a submitter of team ``red`` walk every staff page in a real browser (Debian's Chromium,
headless, against a live Host on PostgreSQL) while team ``blue`` has work everywhere too: nothing of blue
appears (lists, CSV, detail pages, Grove pages, per-team use, the would-refuse report, admin), the
buttons a role may not use are absent, and posting their forms anyway is refused with the API's code
and changes nothing. The submitter then cancels its own run with the button (the control case)."""
from __future__ import annotations

import pytest

from apps.accelerators.models import AcceleratorEntitlement
from apps.flags.services import flag_override_set
from apps.pipelines.models import PipelineNode, PipelineRun
from apps.pipelines.services import pipeline_node_execute
from apps.placement.models import ExecutionPlacement

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]
PASSWORD = "correct-horse-battery"


@pytest.fixture
def walk(estate, users):
    flag_override_set(name="host.staff.execution_observability", enabled=True, reason="browser test")
    for team in ("red", "blue"):
        for node in PipelineNode.objects.filter(run=estate[team]["run"], status="queued"):
            pipeline_node_execute(node_id=node.pk)
        ExecutionPlacement.objects.filter(pk=estate[team]["placement"].pk).update(would_refuse=True)
        AcceleratorEntitlement.objects.create(team=team, api="cuda", max_concurrent=2,
                                              budget_accelerator_seconds=3600)
    for user in users.values():
        user.set_password(PASSWORD)
        user.save()
    return estate


def _login(page, live_server, username: str) -> None:
    page.goto(f"{live_server.url}/admin/login/?next=/staff/runs/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}/staff/runs/")


def _forced_post(page, url: str, data: dict) -> tuple[int, str]:
    """POST a form the page does not offer, with the session's CSRF token, as a hand-made form would."""
    return tuple(page.evaluate("""async ([url, data]) => {
        const token = document.cookie.split('; ').find(c => c.startsWith('csrftoken=')).split('=')[1];
        const body = new URLSearchParams({...data, csrfmiddlewaretoken: token});
        const response = await fetch(url, {method: 'POST', body, redirect: 'manual',
                                           headers: {'X-CSRFToken': token}});
        return [response.status, await response.text()];
    }""", [url, data]))


@pytest.mark.parametrize("role", ["viewer", "submitter"])
def test_a_member_of_one_team_sees_and_touches_nothing_of_the_other(live_server, browser_page, walk, users, role):
    page, base = browser_page, live_server.url
    red, blue = walk["red"], walk["blue"]
    _login(page, live_server, users[role].username)
    blue_marks = [str(blue["run"].id), blue["placement"].subject_id, str(blue["job"].run_id)]

    def shows_no_blue(path: str) -> str:
        response = page.goto(f"{base}{path}")
        assert response.status == 200, (path, response.status)
        html = page.content()
        assert not any(mark in html for mark in blue_marks), path
        return html

    runs = shows_no_blue("/staff/runs/")
    assert str(red["run"].id) in runs
    assert red["placement"].subject_id in shows_no_blue("/staff/placements/")
    report = shows_no_blue("/staff/refusals/")
    assert red["placement"].subject_id in report
    by_team = page.locator("#by-team").inner_text()
    assert "red" in by_team and "blue" not in by_team and "(other teams)" in by_team
    inventory = shows_no_blue("/staff/inventory/")
    assert page.locator("#teams-table").inner_text().count("red") >= 1
    assert "blue" not in page.locator("#teams-table").inner_text() and inventory
    for slug in {node.grove.slug for node in PipelineNode.objects.filter(run__in=[red["run"], blue["run"]])
                 .exclude(grove=None).select_related("grove")}:
        shows_no_blue(f"/staff/groves/{slug}/")
    for export in ("/staff/runs/?_export=csv", "/staff/placements/?_export=csv", "/staff/refusals/?_export=csv"):
        text = page.request.get(f"{base}{export}").text()
        assert not any(mark in text for mark in blue_marks), export
    # Admin: the change list holds only red's runs; blue's change page is refused.
    shows_no_blue("/admin/pipelines/pipelinerun/")
    assert page.goto(f"{base}/admin/pipelines/pipelinerun/{blue['run'].id}/change/").status == 403

    # Another team's run and placement: the API's refusal, as a page.
    for path in (f"/staff/runs/{blue['run'].id}/", f"/staff/placements/{blue['placement'].pk}/"):
        assert page.goto(f"{base}{path}").status == 403
        assert page.locator("#refusal").get_attribute("data-code") == "team_forbidden"

    # Own run: the cancel button only for who may cancel; a forced POST is refused either way.
    page.goto(f"{base}/staff/runs/{red['run'].id}/")
    cancel_url = "/staff/runs/{}/cancel/"
    if role == "viewer":
        assert page.locator("#cancel-run").count() == 0
        status, body = _forced_post(page, cancel_url.format(red["run"].id), {"reason": "forced"})
        assert status == 403 and 'data-code="permission_required"' in body
        assert PipelineRun.objects.get(pk=red["run"].pk).status != "cancelled"
    status, body = _forced_post(page, cancel_url.format(blue["run"].id), {"reason": "forced"})
    assert status == 403
    assert f'data-code="{"permission_required" if role == "viewer" else "team_forbidden"}"' in body
    assert PipelineRun.objects.get(pk=blue["run"].pk).status != "cancelled"
    # Admin's re-place action is not the viewer's or the submitter's: posting it changes nothing.
    page.goto(f"{base}/admin/placement/executionplacement/")
    status, _ = _forced_post(page, "/admin/placement/executionplacement/",
                             {"action": "replace", "_selected_action": str(red["placement"].pk), "index": "0"})
    assert status in (200, 302, 403)
    assert ExecutionPlacement.objects.get(pk=red["placement"].pk).history == []

    if role == "submitter":  # the control: the button is there and works for its own team
        page.goto(f"{base}/staff/runs/{red['run'].id}/")
        page.once("dialog", lambda dialog: dialog.accept())
        page.fill("#id_reason", "own run")
        page.click("#cancel-run")
        page.wait_for_selector("text=cancelled: its live Grove jobs were asked to stop")
        assert PipelineRun.objects.get(pk=red["run"].pk).status == "cancelled"
