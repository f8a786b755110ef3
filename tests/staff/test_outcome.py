"""One rendering of a decision's outcome (apps/placement/outcome.py) on every surface: the staff list,
detail and would-refuse report, the staff API (which the CLI and MCP print), the CLI table and ``/metrics``.
One stored decision per outcome; a refused one (an 8-GPU step that never fits) is never shown as placed."""
from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from apps.placement import outcome
from apps.placement.models import ExecutionPlacement
from forest_cli.main import app
from tests.factories import api_token_for
from tests.placement.test_services import container

FLAG = "host.staff.execution_observability"
# outcome key → (stored outcome, would_refuse, code, incompatibility codes, Grove)
CASES = {
    "placed": ("placed", False, "", [], "box"),
    "would_refuse": ("placed", True, "", ["platform_mismatch"], "box"),
    "refused": ("refused", False, "accelerator_never_fits", [], ""),
    "waiting": ("waiting", False, "waiting_for_capacity", [], ""),
}


def _store(key: str, grove=None) -> ExecutionPlacement:
    stored, would_refuse, code, codes, slug = CASES[key]
    return ExecutionPlacement.objects.create(
        subject_type="compute_step", subject_id=f"job-{key}:step", grove=grove if slug else None,
        grove_slug=grove.slug if slug and grove else "", outcome=stored, code=code,
        requirement=container(family="compute").to_json(),
        decision={"incompatibilities": [{"code": c, "message": c} for c in codes], "candidates": [
            {"grove_id": "x", "grove_slug": "box", "substrate": "native", "eligible": True, "rank": 1,
             "platform": None, "incompatibilities": [], "fit": {"state": "never" if key == "refused" else "now"}}]},
        chooser="selection", enforced=False, would_refuse=would_refuse, team="ml")


@pytest.mark.parametrize("key", outcome.KEYS)
def test_the_pure_rendering_never_calls_a_refusal_placed(key):
    stored, would_refuse, code, codes, slug = CASES[key]
    shown = outcome.render(outcome=stored, would_refuse=would_refuse, grove_slug=slug, code=code,
                           incompatibilities=codes)
    assert shown.key == key and shown.label == key.replace("_", " ")
    assert shown.sentence.startswith("Placed") is (key in ("placed", "would_refuse"))
    assert outcome.render(outcome="refused", would_refuse=True, code="x").key == "refused"  # never placed


@pytest.fixture
def stored(fresh_grove, observability_on):
    grove, _ = fresh_grove(name="box")
    return {key: _store(key, grove) for key in outcome.KEYS}


@pytest.mark.django_db
@pytest.mark.parametrize("key", outcome.KEYS)
def test_staff_list_and_detail_pages(staff_browser, stored, key):
    row = stored[key]
    listing = staff_browser.get("/staff/placements/").content.decode()
    cell = re.search(rf'job-{key}:step.*?</tr>', listing, re.S)[0]
    assert f">{key.replace('_', ' ')}</span>" in cell
    assert "compatible" not in cell
    detail = staff_browser.get(f"/staff/placements/{row.pk}/").content.decode()
    text = re.search(r'id="placement-outcome">(.*?)</p>', detail, re.S)[1]
    assert key.replace("_", " ") in text
    assert ("Placed on" in text) is (key in ("placed", "would_refuse"))
    if key == "refused":  # a compatible Grove the work never fits is not "eligible: yes"
        assert "compatible, never fits" in detail
    csv = b"".join(staff_browser.get("/staff/placements/?_export=csv").streaming_content).decode()
    assert re.search(rf"job-{key}:step.*\b{key}\b", csv)


@pytest.mark.django_db
def test_the_refused_filter_and_report_count_every_refusal(staff_browser, staff_client, stored):
    rows = staff_client.get("/api/forest/v1/staff/placements?refused=true").json()["results"]
    assert {row["verdict"]["key"] for row in rows} == {"refused", "would_refuse"}
    report = staff_browser.get("/staff/refusals/").content.decode()
    assert re.search(r'id="refusal-total"[^>]*>\s*2\s*<', report)


@pytest.mark.django_db
@pytest.mark.parametrize("rolled_up", [False, True])
def test_the_report_counts_groves_and_keeps_refused_apart_from_would_refuse(staff_browser, staff_client, stored,
                                                                          rolled_up):
    """One refusal placed on no Grove and one would-refuse on ``box``: one Grove involved (no Grove is not a
    Grove), one refused and one would refuse — from the placements and from the rollup alike."""
    from apps.staff.services import refusal_rollup_update

    api, page_window = "", ""
    if rolled_up:  # whole days the rollup covers: the report reads its margins, not the placements
        from datetime import UTC, datetime

        ExecutionPlacement.objects.update(created_at=datetime(2026, 1, 5, 10, tzinfo=UTC))
        refusal_rollup_update(now=datetime(2026, 1, 7, tzinfo=UTC))
        api, page_window = "?since=2026-01-01&until=2026-01-06", "?since=2026-01-01&until=2026-01-05"
    body = staff_client.get(f"/api/forest/v1/staff/refusals{api}").json()
    assert (body["total"], body["refused"], body["would_refuse"]) == (2, 1, 1)
    assert (body["groves"], body["no_grove"], body["by_grove"]) == (1, 1, [{"grove": "box", "count": 1}])
    page = staff_browser.get(f"/staff/refusals/{page_window}").content.decode()
    assert re.search(r'id="refused-count"[^>]*>\s*1\s*<', page)
    assert re.search(r'id="would-refuse-count"[^>]*>\s*1\s*<', page)
    assert re.search(r'id="groves-involved"[^>]*>\s*1\s*<', page) and 'id="no-grove-count">1<' in page
    by_grove = page[page.index('id="by-grove"'):].split("</table>")[0]
    assert "box" in by_grove and by_grove.count("<tr>") == 1


@pytest.mark.django_db
@pytest.mark.parametrize("key", outcome.KEYS)
def test_staff_api_verdict(staff_client, stored, key):
    rows = staff_client.get("/api/forest/v1/staff/placements").json()["results"]
    row = next(r for r in rows if r["subject_id"] == f"job-{key}:step")
    assert row["verdict"]["key"] == key and row["verdict"]["label"] == key.replace("_", " ")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("key", outcome.KEYS)
def test_cli_table(live_server, staff_user, stored, key):
    """At 80 columns (a plain terminal) each row keeps its id, its verdict and its age on one line."""
    result = CliRunner().invoke(app, ["--host", live_server.url, "--token", api_token_for(staff_user), "placements"],
                                catch_exceptions=False, env={"COLUMNS": "80"})
    line = next(line for line in result.output.splitlines() if re.search(rf"\b{stored[key].pk}\b", line[:8]))
    assert key.replace("_", " ") in line and "compatible" not in line
    assert max(len(text) for text in result.output.splitlines()) <= 80


@pytest.mark.django_db
@pytest.mark.parametrize("key", outcome.KEYS)
def test_metrics(staff_browser, stored, key):
    text = staff_browser.get("/metrics").content.decode()
    assert re.search(rf'forest_placement_decisions_recent\{{chooser="selection",outcome="{key}"\}} 1\.0', text), text
