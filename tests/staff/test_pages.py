"""Every staff page: access (anonymous, non-staff, staff; flag off/on), every filter, invalid values shown,
sorting, CSV export, htmx fragments, and bounded query counts."""
from __future__ import annotations

import csv
import io

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.accelerators.models import AcceleratorEntitlement
from apps.pipelines.models import PipelineNode, PipelineRun
from apps.placement.models import ExecutionPlacement

pytestmark = pytest.mark.django_db
PAGES = ["/staff/groves/", "/staff/inventory/", "/staff/placements/", "/staff/runs/", "/staff/refusals/",
         "/staff/status/"]


@pytest.mark.parametrize("url", PAGES)
def test_every_page_needs_staff_and_the_flag(client, django_user_model, staff_user, url):
    assert client.get(url).status_code == 302 and "/admin/login/" in client.get(url)["Location"]
    client.force_login(django_user_model.objects.create_user("visitor", is_staff=False))
    assert client.get(url).status_code == 302
    client.force_login(staff_user)
    off = client.get(url)
    assert off.status_code == 404 and b"host.staff.execution_observability" in off.content


@pytest.mark.parametrize("url", PAGES)
def test_every_page_renders_for_staff(staff_browser, observability_on, dispatched_run, url):
    dispatched_run()
    response = staff_browser.get(url)
    assert response.status_code == 200 and b"<html" in response.content


def test_groves_are_sortable_paged_and_exported(staff_browser, observability_on, estate):
    page = staff_browser.get("/staff/groves/?sort=-slug&per_page=1", HTTP_HX_REQUEST="true")
    assert b"<html" not in page.content and b'id="groves-table"' in page.content
    assert b"k8s-compute" in page.content and b"gpu-box" not in page.content  # first of two, by slug descending
    assert b"next" in page.content
    export = staff_browser.get("/staff/groves/?_export=csv&substrate=native")
    assert export["Content-Type"] == "text/csv"
    rows = list(csv.reader(io.StringIO(b"".join(export.streaming_content).decode())))
    assert rows[0][0] == "Grove" and [r[0] for r in rows[1:]] == ["gpu-box"]
    assert "2x NVIDIA H100 80GB HBM3 (cuda) · 80 GiB dedicated · exclusive · 2/2 slots free" in rows[1]


def test_column_choice_on_the_page_and_in_csv(staff_browser, observability_on, estate):
    page = staff_browser.get("/staff/groves/?col=slug&col=substrate&col=nonsense", HTTP_HX_REQUEST="true")
    assert b"Substrate" in page.content and b"Platforms" not in page.content and b"k8s-compute" in page.content
    export = staff_browser.get("/staff/groves/?col=slug&col=substrate&_export=csv")
    rows = list(csv.reader(io.StringIO(b"".join(export.streaming_content).decode())))
    assert rows[0] == ["Grove", "Substrate"]


@pytest.mark.parametrize("query", ["substrate=bogus", "stale=perhaps", "role=wizard"])
def test_an_invalid_filter_value_is_an_error_not_an_unfiltered_list(staff_browser, observability_on, estate, query):
    response = staff_browser.get(f"/staff/groves/?{query}")
    assert response.status_code == 400
    assert b'id="filter-errors"' in response.content and query.split("=")[1].encode() in response.content
    assert b"k8s-compute" not in response.content


def test_yes_no_filters_offer_any_not_unknown(staff_browser, observability_on, estate):
    content = staff_browser.get("/staff/placements/").content
    assert b"Unknown" not in content and b'<option value="" selected>any</option>' in content


def test_grove_list_query_count_is_bounded(staff_browser, observability_on, fresh_grove,
                                           django_assert_max_num_queries):
    for n in range(12):
        fresh_grove(name=f"box-{n}", gpus=n % 3)
    with django_assert_max_num_queries(8):
        response = staff_browser.get("/staff/groves/?per_page=50")
    assert response.status_code == 200 and response.content.count(b"box-") >= 12


def test_grove_detail_shows_units_devices_jobs_reports_and_placements(staff_browser, observability_on, estate,
                                                                       dispatched_run):
    dispatched_run()
    page = staff_browser.get("/staff/groves/gpu-box/").content.decode()
    assert "Placement units" in page and "GPU-0" in page and "GPU-1" in page
    assert "Running jobs" in page and "Recent capacity reports" in page and "Native workloads" in page
    assert "/staff/placements/?grove_slug=gpu-box" in page
    k8s = staff_browser.get("/staff/groves/k8s-compute/").content.decode()
    assert "· node train" in k8s and "assigned" in k8s  # the dispatched job, with its run link
    assert staff_browser.get("/staff/groves/nope/").status_code == 404


def test_placements_filter_by_every_field(staff_browser, observability_on, estate, dispatched_run):
    k8s, gpu = estate
    dispatched_run(team="ml")
    total = ExecutionPlacement.objects.count()
    assert total == 2
    shadow = ExecutionPlacement.objects.get(would_refuse=True)
    code = shadow.decision["incompatibilities"][0]["code"]

    def rows(query: str) -> int:
        response = staff_browser.get(f"/staff/placements/?{query}", HTTP_HX_REQUEST="true")
        assert response.status_code == 200, response.content
        return response.content.count(b"/staff/placements/") - response.content.count(b"/staff/placements/?")

    assert rows("") == 2
    assert rows("would_refuse=true") == 1 and rows("would_refuse=false") == 1
    assert rows(f"grove_slug={gpu.slug}") == 1 and rows(f"grove={k8s.id}") == 1
    assert rows("subject_type=pipeline_node") == 2 and rows("subject_type=compute_step") == 0
    assert rows(f"subject_id={shadow.subject_id}") == 1
    assert rows("platform=linux/amd64") == 2 and rows("platform=darwin/arm64") == 0
    assert rows("enforced=false") == 2 and rows("enforced=true") == 0
    assert rows("chooser=explicit") == 1 and rows("chooser=selection") == 1
    assert rows(f"code={code}") == 1 and rows("code=no_such_code") == 0
    # The pinned node, placed at run creation, records the run's team like the unpinned one.
    assert rows("team=ml") == 2 and rows("team=web") == 0
    assert rows("created_after=2000-01-01T00:00:00Z") == 2 and rows("created_before=2000-01-01T00:00:00Z") == 0
    bad = staff_browser.get("/staff/placements/?created_after=yesterday&chooser=psychic")
    assert bad.status_code == 400 and b"created_after" in bad.content and b"chooser" in bad.content


def test_placement_rows_name_the_job_status_and_link_the_run(staff_browser, observability_on, dispatched_run,
                                                            django_assert_max_num_queries):
    run = dispatched_run()
    with django_assert_max_num_queries(8):  # + the bounded total, + the compute jobs behind the page's runs
        page = staff_browser.get("/staff/placements/", HTTP_HX_REQUEST="true").content.decode()
    assert f"compute run {str(run.id)[:8]} · node train" in page and "· node pinned" in page
    assert f"/staff/runs/{run.id}/" in page and "would refuse" in page


def test_placement_detail_explains_why_not_and_links_the_run(staff_browser, observability_on, dispatched_run):
    run = dispatched_run()
    shadow = ExecutionPlacement.objects.get(would_refuse=True)
    page = staff_browser.get(f"/staff/placements/{shadow.pk}/").content.decode()
    for item in shadow.decision["incompatibilities"]:
        assert item["code"] in page and item["message"] in page
    assert f"/staff/runs/{run.id}/" in page and "Platforms accepted" in page and "linux/amd64" in page
    good = ExecutionPlacement.objects.get(would_refuse=False)
    detail = staff_browser.get(f"/staff/placements/{good.pk}/").content.decode()
    assert 'id="candidates"' in detail and "Why not the other Groves" in detail and "gpu-box" in detail
    assert staff_browser.get("/staff/placements/999999/").status_code == 404


def test_runs_list_filters_and_detail_shows_nodes(staff_browser, observability_on, dispatched_run,
                                                  django_assert_max_num_queries):
    run = dispatched_run()
    with django_assert_max_num_queries(8):  # + the bounded total, + the compute jobs behind the page's runs
        listing = staff_browser.get("/staff/runs/?kind=compute&status=running", HTTP_HX_REQUEST="true")
    assert str(run.id)[:8].encode() in listing.content and b"0 / 0 / 2" in listing.content
    assert str(run.id)[:8].encode() not in staff_browser.get("/staff/runs/?kind=build", HTTP_HX_REQUEST="true").content
    assert staff_browser.get("/staff/runs/?status=bogus").status_code == 400
    detail = staff_browser.get(f"/staff/runs/{run.id}/").content.decode()
    assert 'id="nodes-table"' in detail and "train" in detail and "pinned" in detail
    assert "awaiting" in detail and 'id="cancel-run"' in detail and "would refuse" in detail


def test_staff_cancel_needs_post_and_confirms(staff_browser, observability_on, dispatched_run):
    run = dispatched_run()
    confirm = staff_browser.get(f"/staff/runs/{run.id}/cancel/")
    assert confirm.status_code == 200 and b"Yes, cancel this run" in confirm.content
    assert PipelineRun.objects.get(pk=run.id).status == "running"  # GET changes nothing
    done = staff_browser.post(f"/staff/runs/{run.id}/cancel/", {"reason": "stuck in review"}, follow=True)
    assert done.status_code == 200 and b"cancelled" in done.content
    run.refresh_from_db()
    assert run.status == "cancelled" and run.reason == "stuck in review"
    assert not PipelineNode.objects.filter(run=run).exclude(status__in=["cancelled", "succeeded", "failed"]).exists()
    assert b'id="cancel-run"' not in done.content


def test_refusal_report_counts_trend_and_csv(staff_browser, observability_on, dispatched_run):
    dispatched_run(team="ml")
    dispatched_run(team="web")
    shadow = ExecutionPlacement.objects.filter(would_refuse=True).first()
    code = shadow.decision["incompatibilities"][0]["code"]
    PipelineNode.objects.filter(pk=PipelineNode.objects.first().pk).update(status="failed",
                                                                          reason="placement_refused",
                                                                          finished_at=shadow.created_at)
    page = staff_browser.get("/staff/refusals/").content.decode()
    assert '<strong id="refusal-total">2</strong>' in page
    assert code in page and "gpu-box" in page and "placement_refused" in page
    by_team = page[page.index('id="by-team"'):].split("</table>")[0]
    assert "<td>ml</td><td>1</td>" in by_team and "<td>web</td><td>1</td>" in by_team and "(no team)" not in by_team
    assert "<svg" in page and page.count('class="bar"') == 14  # one bar per day of the default window
    export = staff_browser.get("/staff/refusals/?_export=csv")
    rows = list(csv.reader(io.StringIO(b"".join(export.streaming_content).decode())))
    assert len(rows) == 3 and all("would_refuse" in " ".join(row) for row in rows[1:])
    assert staff_browser.get("/staff/refusals/?since=last-week").status_code == 400
    assert staff_browser.get("/staff/refusals/?since=2030-01-02&until=2030-01-01").status_code == 400
    assert staff_browser.get("/staff/refusals/?since=9999-12-30&until=9999-12-31").status_code == 400
    empty = staff_browser.get("/staff/refusals/?since=2001-01-01&until=2001-01-03").content.decode()
    assert '<strong id="refusal-total">0</strong>' in empty


def test_refused_rows_are_listed_when_they_exist(staff_browser, observability_on, dispatched_run):
    """A placement stored as refused (enforced, incompatible) counts in the report like a shadow one."""
    dispatched_run()
    ExecutionPlacement.objects.filter(would_refuse=True).update(would_refuse=False, enforced=True)
    page = staff_browser.get("/staff/refusals/").content.decode()
    assert '<strong id="refusal-total">1</strong>' in page and "refused" in page


def test_inventory_groups_devices_and_shows_team_use(staff_browser, observability_on, estate, dispatched_run):
    AcceleratorEntitlement.objects.create(team="ml", api="cuda", max_concurrent=4, budget_accelerator_seconds=3600)
    page = staff_browser.get("/staff/inventory/").content.decode()
    assert 'id="inventory-table"' in page and "NVIDIA H100 80GB HBM3" in page and "2 / 2" in page
    assert 'id="teams-table"' in page and "0 / 4" in page and "0% used" in page


def test_inventory_does_not_count_devices_only_simulated_groves_report(staff_browser, observability_on, fresh_grove):
    from apps.groves.models import Grove

    demo, _ = fresh_grove(name="demo", gpus=2, polled=False)
    Grove.objects.filter(pk=demo.pk).update(simulated=True)
    page = staff_browser.get("/staff/inventory/").content.decode()
    real, _sep, simulated = page.partition('id="simulated-inventory-table"')
    assert "No real Grove reports an accelerator." in real and "NVIDIA" not in real.split('id="inventory-table"')[1]
    assert "NVIDIA H100 80GB HBM3" in simulated and "simulated" in simulated
    body = staff_browser.get("/api/forest/v1/staff/inventory").json()
    assert body["accelerators"] == [] and [g["groves_not_ready"] for g in body["simulated"]] == [1]


def test_status_page_lists_every_capability(staff_browser, observability_on):
    from apps.staff.capabilities import CAPABILITIES

    page = staff_browser.get("/staff/status/").content.decode()
    assert all(c.name.replace("'", "&#x27;") in page for c in CAPABILITIES)
    assert "needs hardware not present" in page and "gated by flag" in page


def test_lists_read_no_whole_decision_and_csv_cells_are_plain(staff_browser, observability_on, dispatched_run):
    dispatched_run()
    with CaptureQueriesContext(connection) as queries:
        page = staff_browser.get("/staff/placements/", HTTP_HX_REQUEST="true").content.decode()
    assert "would refuse" in page and "<code>" in page  # the verdict's codes, from the decision's list alone
    listing = [q["sql"] for q in queries.captured_queries if 'FROM "placement_executionplacement"' in q["sql"]]
    assert listing and all('"placement_executionplacement"."decision",' not in sql
                           and '"placement_executionplacement"."requirement"' not in sql for sql in listing)
    export = staff_browser.get("/staff/placements/?_export=csv")
    rows = list(csv.reader(io.StringIO(b"".join(export.streaming_content).decode())))
    assert rows[0][2] == "Grove" and {row[2] for row in rows[1:]} == {"k8s-compute", "gpu-box"}
    assert not any("<" in cell for row in rows for cell in row)


@pytest.mark.parametrize("url", ["/staff/placements/", "/staff/runs/", "/staff/refusals/"])
def test_pages_stop_at_the_offset_cap_with_a_pointer_to_the_filters(staff_browser, observability_on, dispatched_run,
                                                                    url):
    dispatched_run()
    deepest = staff_browser.get(f"{url}?page=200&per_page=50")  # rows 9,951-10,000: still served
    assert deepest.status_code == 200 and b'id="page-error"' not in deepest.content
    past = staff_browser.get(f"{url}?page=201&per_page=50")
    assert past.status_code == 400 and b'id="page-error"' in past.content and b"narrow the filters" in past.content
    assert b"compute node" not in past.content
