"""The staff read API: staff + flag gates in the error shape, the pages' filtersets, refused listing."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.placement.models import ExecutionPlacement

pytestmark = pytest.mark.django_db
V1 = "/api/forest/v1"
ENDPOINTS = ["staff/groves", "staff/inventory", "staff/placements", "staff/refusals", "staff/capabilities"]


@pytest.mark.parametrize("path", ENDPOINTS)
def test_staff_api_is_staff_only_and_behind_the_flag(anon_client, user_client, staff_client, path):
    assert anon_client.get(f"{V1}/{path}").json()["code"] == "not_authenticated"
    response = user_client.get(f"{V1}/{path}")
    assert response.status_code == 403 and response.json()["code"] == "staff_only"
    off = staff_client.get(f"{V1}/{path}")
    assert off.status_code == 404 and off.json()["code"] == "feature_disabled"


@pytest.mark.parametrize("path", ENDPOINTS)
def test_staff_api_answers_staff_with_the_flag_on(staff_client, observability_on, dispatched_run, path):
    dispatched_run()
    assert staff_client.get(f"{V1}/{path}").status_code == 200


def test_grove_credentials_never_open_the_staff_api(grove_client, estate, fresh_grove, observability_on):
    _grove, credential = fresh_grove(name="other")
    response = grove_client(credential).get(f"{V1}/staff/groves")
    assert response.status_code == 401
    assert "this endpoint takes 'Authorization: Token <...>'" in response.json()["detail"]


def test_staff_groves_filter_like_the_page(staff_client, observability_on, estate, django_assert_max_num_queries):
    with django_assert_max_num_queries(9):  # 8 reads + the role permission lookup (cached for the request)
        body = staff_client.get(f"{V1}/staff/groves", {"accelerator_api": "cuda"}).json()
    assert [g["slug"] for g in body["results"]] == ["gpu-box"]
    bad = staff_client.get(f"{V1}/staff/groves", {"substrate": "bogus"})
    assert bad.status_code == 400 and bad.json()["field"] == "substrate" and bad.json()["code"] == "invalid_choice"


def test_staff_placements_describe_subjects_and_list_refusals(staff_client, observability_on, dispatched_run):
    run = dispatched_run()
    body = staff_client.get(f"{V1}/staff/placements").json()
    assert body["count"] == 2
    labels = {item["subject"]["label"] for item in body["results"]}
    assert labels == {f"compute run {str(run.id)[:8]} · node train", f"compute run {str(run.id)[:8]} · node pinned"}
    assert {item["subject"]["run_id"] for item in body["results"]} == {str(run.id)}
    refused = staff_client.get(f"{V1}/staff/placements", {"refused": "true"}).json()
    assert refused["count"] == 1 and refused["results"][0]["would_refuse"] is True
    code = refused["results"][0]["decision"]["incompatibilities"][0]["code"]
    assert staff_client.get(f"{V1}/staff/placements", {"code": code}).json()["count"] == 1
    assert staff_client.get(f"{V1}/staff/placements", {"would_refuse": "maybe"}).json()["code"] == "invalid_choice"
    # Offsets PostgreSQL cannot store (beyond ±15:59) are compared in UTC, not sent to the database.
    late = staff_client.get(f"{V1}/staff/placements", {"created_before": "2000-01-01T00:00:00-22:58"})
    assert late.status_code == 200 and late.json()["count"] == 0
    since = (timezone.now() - timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%S+23:00")
    assert staff_client.get(f"{V1}/staff/refusals", {"since": since}).status_code == 200


def test_refusal_report_over_a_relative_window(staff_client, observability_on, dispatched_run):
    dispatched_run()
    body = staff_client.get(f"{V1}/staff/refusals", {"since": "7d"}).json()
    codes = {i["code"] for i in ExecutionPlacement.objects.get(would_refuse=True).decision["incompatibilities"]}
    assert body["total"] == 1 and {c["code"] for c in body["by_code"]} == codes
    assert body["by_grove"][0]["grove"] == "gpu-box"
    assert sum(day["count"] for day in body["trend"]) == 1
    bad = staff_client.get(f"{V1}/staff/refusals", {"since": "soon"})
    assert bad.status_code == 400 and bad.json()["field"] == "since"


def test_groves_api_is_staff_only(user_client, staff_client, estate):
    # The Grove read API declares its role permission (docs/permissions.md): a token user without one is refused.
    assert user_client.get(f"{V1}/groves").json()["code"] == "permission_required"
    assert staff_client.get(f"{V1}/groves").status_code == 200


def test_staff_placement_list_reads_whole_rows_in_bounded_queries(staff_client, observability_on, dispatched_run,
                                                                   django_assert_max_num_queries):
    dispatched_run(team="ml")
    dispatched_run(team="web")
    # Whatever the page size: the token, the permissions, the flags, the count, the page, one query each for
    # its subjects (nodes, then compute jobs) and one for its shared verdicts.
    with django_assert_max_num_queries(8):
        body = staff_client.get(f"{V1}/staff/placements").json()
    assert body["count"] == 4 and all(row["requirement"] and row["decision"] for row in body["results"])
    assert {row["environment"] for row in body["results"]} == {""} and all(row["history"] == [] for row in
                                                                          body["results"])
