"""Small truths of the first hour (issue 21, point 8): labelled Grove filters, a 413 that names the setting an
operator sets, the article of an error sentence."""
from __future__ import annotations

import pytest

from apps.core.errors import ValidationFailed
from apps.groves.filtersets import GroveFilterSet


def test_every_grove_filter_has_a_label_of_its_own():
    labels = {name: field.label for name, field in GroveFilterSet().form.fields.items()}
    assert "[invalid name]" not in labels.values()
    assert labels["role"] == "Role" and labels["stale"] == "Stale" and labels["ready"].startswith("Ready")


def test_a_body_too_large_for_django_names_forest_s_setting(settings):
    from django.core.exceptions import RequestDataTooBig

    from apps.core.api.exceptions import forest_exception_handler

    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100
    response = forest_exception_handler(
        RequestDataTooBig("Request body exceeded settings.DATA_UPLOAD_MAX_MEMORY_SIZE."), {})
    assert response.status_code == 413 and response.data["code"] == "payload_too_large"
    assert "FOREST_MAX_BODY_BYTES" in response.data["detail"] and "100 bytes" in response.data["detail"]
    assert "DATA_UPLOAD_MAX_MEMORY_SIZE" not in response.data["detail"]


def test_an_exec_node_error_reads_an_exec_node():
    from apps.pipelines import bodies

    with pytest.raises(ValidationFailed, match=r"^An exec node with a container needs an image"):
        bodies.graph_parse({"nodes": [{"id": "a", "kind": "exec", "command": ["true"]}]})


@pytest.mark.django_db
def test_staff_lists_show_a_total_capped_without_an_unbounded_count(client, staff_user, fresh_grove, settings):
    from apps.flags.services import flag_override_set

    flag_override_set(name="host.staff.execution_observability", enabled=True, reason="test")
    client.force_login(staff_user)
    fresh_grove(name="a")
    fresh_grove(name="b")
    page = client.get("/staff/groves/").content.decode()
    assert 'id="list-total">2 matching' in page
    settings.FOREST_LIST_TOTAL_CAP = 1
    assert 'id="list-total">more than 1 matching' in client.get("/staff/groves/").content.decode()


@pytest.mark.django_db
def test_api_pages_carry_the_same_bounded_total(staff_client, fresh_grove, settings):
    """The API's paged lists count like the staff pages: exact up to the cap, then the cap and
    ``count_capped`` (no unbounded COUNT); ``next`` still says whether another page exists."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from apps.flags.services import flag_override_set

    flag_override_set(name="host.staff.execution_observability", enabled=True, reason="test")
    for name in ("a", "b", "c"):
        fresh_grove(name=name)
    exact = staff_client.get("/api/forest/v1/staff/groves", {"page_size": 2}).json()
    assert (exact["count"], exact["count_capped"], len(exact["results"])) == (3, False, 2) and exact["next"]
    last = staff_client.get(exact["next"]).json()
    assert len(last["results"]) == 1 and last["next"] is None and last["previous"]
    settings.FOREST_LIST_TOTAL_CAP = 2
    with CaptureQueriesContext(connection) as queries:
        capped = staff_client.get("/api/forest/v1/staff/groves", {"page_size": 1}).json()
    assert (capped["count"], capped["count_capped"]) == (2, True) and capped["next"]
    counts = [q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"].upper()]
    assert counts and all("LIMIT 3" in sql for sql in counts)
    assert staff_client.get("/api/forest/v1/staff/groves", {"page": 9}).json()["code"]


@pytest.mark.django_db
def test_the_api_docs_load_nothing_from_the_internet(client):
    import re

    for url in ("/api/redoc/", "/api/docs/"):
        page = client.get(url).content.decode()
        external = re.findall(r'(?:src|href)="(https?://[^"]+)"', page)
        assert external == [] and "googleapis" not in page, (url, external)


@pytest.mark.django_db
def test_an_api_page_deeper_than_the_offset_bound_is_a_coded_400(staff_client, fresh_grove):
    """OFFSET walks every row before a page: past MAX_OFFSET_ROWS the API answers as the staff pages do."""
    from apps.flags.services import flag_override_set

    flag_override_set(name="host.staff.execution_observability", enabled=True, reason="test")
    fresh_grove(name="only-one")
    for page in ("99999999999999999999", "201"):
        answer = staff_client.get("/api/forest/v1/staff/groves", {"page": page, "page_size": 50})
        assert answer.status_code == 400, answer.content
        assert answer.json()["code"] == "page_too_deep" and answer.json()["field"] == "page"
    assert staff_client.get("/api/forest/v1/staff/groves", {"page": "200", "page_size": 50}).status_code == 404
