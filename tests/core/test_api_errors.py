"""Every /api/ answer is in the one error shape: unrouted paths, malformed ids, wrong methods and media
types, wrong auth schemes (with a hint), and unknown fields (with the nearest name)."""
from __future__ import annotations

import json
import logging

import pytest

from apps.core.logging import structured_formatter
from apps.core.validation import unknown_field_sentence
from tests.factories import api_token_for

pytestmark = pytest.mark.django_db
V1 = "/api/forest/v1"


def _shape(response) -> dict:
    assert response["Content-Type"].startswith("application/json"), response.content[:200]
    body = response.json()
    assert set(body) <= {"code", "detail", "field"} and body["code"] and body["detail"]
    return body


def test_an_unrouted_api_path_is_json_404(staff_client):
    body = _shape(staff_client.get(f"{V1}/no-such-thing"))
    assert body["code"] == "not_found" and "/api/forest/v1/no-such-thing" in body["detail"]


@pytest.mark.parametrize(("path", "field", "kind"), [
    ("groves/not-a-uuid", "grove_id", "UUID"),
    ("pipelines/runs/12345", "run_id", "UUID"),
    ("placements/abc", "placement_id", "whole number"),
])
def test_a_malformed_id_says_which_id_and_what_shape(staff_client, path, field, kind):
    response = staff_client.get(f"{V1}/{path}")
    body = _shape(response)
    assert response.status_code == 404 and body["code"] == "invalid_id" and body["field"] == field
    assert kind in body["detail"]


def test_wrong_method_and_media_type_are_json(staff_client):
    response = staff_client.delete(f"{V1}/placements")
    assert response.status_code == 405 and _shape(response)["code"] == "method_not_allowed"
    response = staff_client.post(f"{V1}/placements/preview", "x=1", content_type="application/x-www-form-urlencoded")
    assert response.status_code == 415 and _shape(response)["code"] == "unsupported_media_type"


def test_bearer_with_a_staff_token_gets_a_hint(staff_client, anon_client, staff_user):
    key = api_token_for(staff_user)
    anon_client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    response = anon_client.get(f"{V1}/placements")
    body = _shape(response)
    assert response.status_code == 401 and body["code"] == "not_authenticated"
    assert "You sent a 'Bearer' credential; this endpoint takes 'Authorization: Token <...>'" in body["detail"]
    assert response["WWW-Authenticate"].startswith("Token")


def test_token_on_a_grove_endpoint_gets_the_bearer_hint(staff_client, fresh_grove):
    grove, _ = fresh_grove()
    response = staff_client.get(f"{V1}/groves/{grove.id}/changes")
    assert response.status_code == 401 and "Bearer" in _shape(response)["detail"]


def test_unknown_fields_suggest_the_nearest_name(staff_client):
    body = {"family": "build", "resources": {"cpu_milli": 1, "memory_bytes": 1},
            "compatibility": {"platfrom": {"allowed": ["linux/amd64"]}, "artifact_kind": "oci_image",
                              "change_kind": "k8s.build_job", "isolation": "container"}, "trust": "trusted"}
    response = staff_client.post(f"{V1}/placements/preview", body, format="json")
    error = _shape(response)
    assert error["code"] == "unknown_field" and error["field"] == "compatibility.platfrom"
    assert "did you mean 'platform'?" in error["detail"]
    assert "expected one of: a, b" in unknown_field_sentence("zzz", {"a", "b"})


def test_swagger_and_redoc_are_served_offline(client):
    for url in ("/api/docs/", "/api/redoc/"):
        page = client.get(url).content.decode()
        assert "cdn" not in page.lower() and "/static/drf_spectacular_sidecar/" in page


def test_structured_logs_keep_extra_fields():
    formatter = structured_formatter(console=False)
    record = logging.LogRecord("apps.flags.services", logging.INFO, __file__, 1, "flag changed", None, None)
    record.flag, record.actor = "host.deploy.forest_compatibility", "root"
    line = json.loads(formatter.format(record))
    assert line["event"] == "flag changed" and line["flag"] == "host.deploy.forest_compatibility"
    assert line["actor"] == "root"
