"""The placement API: preview (nothing stored), list with filters and pages, detail, re-place, auth."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from apps.accounts.roles import VIEWER
from apps.flags import services as flags
from apps.pipelines.rules import node_requirement
from apps.placement import services
from apps.placement.models import ExecutionPlacement
from tests.factories import UserFactory, api_token_for, grant

pytestmark = pytest.mark.django_db
URL = "/api/forest/v1/placements"
BODY = {"family": "build", "compatibility": {"platform": {"allowed": ["linux/amd64"], "sources": ["ci"]},
                                             "artifact_kind": "oci_image", "change_kind": "k8s.job",
                                             "isolation": "container"}}


def node(platform="linux/amd64"):
    return node_requirement({"id": "n", "kind": "exec", "platform": [platform]}, run_kind="build")


def test_preview_explains_and_stores_nothing(staff_client, make_grove):
    good = make_grove("good")
    make_grove("arm", platforms=("linux/arm64",))
    response = staff_client.post(f"{URL}/preview", BODY, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["selected"] == {"grove_id": str(good.id), "grove_slug": "good", "platform": "linux/amd64"}
    assert body["enforced"] is False and body["would_refuse"] is False and body["incompatibilities"] == []
    candidates = {c["grove_slug"]: c for c in body["candidates"]}
    assert candidates["good"]["eligible"] and candidates["good"]["rank"] == 1
    assert candidates["arm"]["incompatibilities"][0]["code"] == "platform_mismatch"
    assert candidates["arm"]["rank"] is None
    assert not ExecutionPlacement.objects.exists()


def test_preview_under_enforcement_selects_nothing(staff_client, make_grove):
    flags.flag_override_set(name="host.deploy.forest_compatibility", enabled=True, reason="t")
    make_grove("arm", platforms=("linux/arm64",))
    body = staff_client.post(f"{URL}/preview", BODY, format="json").json()
    assert body["selected"] is None and body["enforced"] is True and body["refusal"]["code"] == "placement_refused"
    assert body["incompatibilities"][0]["code"] == "platform_mismatch"


def test_preview_shadow_mode_reports_would_refuse(staff_client, make_grove):
    make_grove("arm", platforms=("linux/arm64",))
    body = staff_client.post(f"{URL}/preview", BODY, format="json").json()
    assert body["selected"]["grove_slug"] == "arm" and body["would_refuse"] is True


@pytest.mark.parametrize(("body", "code", "field"), [
    ({**BODY, "extra": 1}, "unknown_field", "extra"),
    ({**BODY, "resources": {"cpu_milli": -1}}, "out_of_range", "resources.cpu_milli"),
    ({**BODY, "accelerators": {"count": 2, "vendor": "apple"}}, "apple_accelerator_count", "accelerators.count"),
])
def test_preview_rejects_bad_requirements_with_the_error_shape(staff_client, body, code, field):
    response = staff_client.post(f"{URL}/preview", body, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == code and response.json()["field"] == field


def test_list_filters_and_paginates(staff_client, make_grove):
    amd = make_grove("amd")
    for i in range(3):
        services.place_execution(subject_type="pipeline_node", subject_id=str(i), requirement=node())
    services.place_execution(subject_type="compute_step", subject_id="c1", requirement=node("linux/arm64"))
    body = staff_client.get(URL, {"page_size": 2}).json()
    assert body["count"] == 4 and len(body["results"]) == 2 and body["next"]
    assert staff_client.get(URL, {"would_refuse": "true"}).json()["count"] == 1
    assert staff_client.get(URL, {"subject_type": "compute_step"}).json()["results"][0]["subject_id"] == "c1"
    assert staff_client.get(URL, {"grove": str(amd.id), "enforced": "false"}).json()["count"] == 4
    assert staff_client.get(URL, {"subject_id": "2"}).json()["count"] == 1


def test_detail_and_not_found(staff_client, make_grove):
    make_grove("amd")
    placement = services.place_execution(subject_type="pipeline_node", subject_id="1", requirement=node()).placement
    body = staff_client.get(f"{URL}/{placement.pk}").json()
    assert body["grove_slug"] == "amd" and body["decision"]["selected_platform"] == "linux/amd64"
    assert body["requirement"] == node().to_json()
    missing = staff_client.get(f"{URL}/999999")
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"


def test_replace_is_staff_only(staff_client, make_grove):
    gone = make_grove("old")
    placement = services.place_execution(subject_type="pipeline_node", subject_id="1", requirement=node()).placement
    make_grove("new")
    gone.delete()
    user = grant(UserFactory(username="ci", is_staff=False), VIEWER)
    ci = APIClient()
    ci.credentials(HTTP_AUTHORIZATION=f"Token {api_token_for(user)}")
    assert ci.get(URL).status_code == 200  # a token user may read
    assert ci.post(f"{URL}/{placement.pk}/replace", {"reason": "x"}, format="json").status_code == 403
    response = staff_client.post(f"{URL}/{placement.pk}/replace", {"reason": "old Grove removed"}, format="json")
    assert response.status_code == 200 and response.json()["grove_slug"] == "new"
    assert response.json()["history"][0]["grove_slug"] == "old"


def test_anonymous_and_grove_credentials_are_refused(anon_client, grove_client, fresh_grove):
    _, credential = fresh_grove()
    for client in (anon_client, grove_client(credential)):
        for response in (client.get(URL), client.post(f"{URL}/preview", BODY, format="json")):
            assert response.status_code in (401, 403)
            assert response.json()["code"] in {"not_authenticated", "authentication_failed"}


def test_schema_endpoint_publishes_the_json_schema(staff_client):
    body = staff_client.get(f"{URL}/schema").json()
    assert body["title"] == "ExecutionRequirement" and "compatibility" in body["required"]
