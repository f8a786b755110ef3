"""The Grove wire API and the staff read API through DRF's client: shapes, auth, and every bad input."""
from __future__ import annotations

import json

import pytest

from apps.dispatch.bodies import JobReport
from apps.groves import services
from apps.groves.bodies import EnrollRequest, HeartbeatRequest
from apps.groves.models import Grove, PlacementUnit
from apps.groves.vocabulary import MAX_PLATFORMS
from tests.factories import heartbeat_body

pytestmark = pytest.mark.django_db
V1 = "/api/forest/v1"


def _enroll_body(token, **extra):
    return {"token": token, "name": "gpu box", "substrate": "native", "platforms": ["linux/amd64"],
            "version": "0.1.0", **extra}


def test_enroll_returns_grove_id_and_credential(anon_client):
    _, token = services.enrollment_token_create(roles=["compute"], substrate="native")
    response = anon_client.post(f"{V1}/groves/enroll", _enroll_body(token), format="json")
    assert response.status_code == 201, response.json()
    assert set(response.json()) == {"grove_id", "credential"}
    assert Grove.objects.get(pk=response.json()["grove_id"]).roles == ["compute"]


@pytest.mark.parametrize(
    ("mutate", "status", "code", "field"),
    [
        (lambda b: {**b, "platforms": ["linux/amd65"]}, 400, "invalid_platform", "platforms[0]"),
        (lambda b: {**b, "platforms": ["plan9/amd64"]}, 400, "invalid_platform", "platforms[0]"),
        (lambda b: {**b, "platforms": ["linux/arm64/v5"]}, 400, "invalid_platform", "platforms[0]"),
        (lambda b: {**b, "platforms": ["linux/amd64", "{os}/arm64"]}, 400, "invalid_platform", "platforms[1]"),
        (lambda b: {**b, "platforms": ["linux/amd64", 7]}, 400, "invalid_platform", "platforms[1]"),
        (lambda b: {**b, "platforms": "linux/amd64"}, 400, "invalid_type", "platforms"),
        (lambda b: {**b, "platforms": ["linux/amd64"] * 33}, 400, "too_many_items", "platforms"),
        (lambda b: {**b, "platforms": []}, 400, "field_blank", "platforms"),
        (lambda b: {**b, "name": "   "}, 400, "field_blank", "name"),
        (lambda b: {**b, "version": "v" * 101}, 400, "too_long", "version"),
        (lambda b: {**b, "substrate": "vm"}, 400, "invalid_choice", "substrate"),
        (lambda b: {**b, "name": 7}, 400, "invalid_type", "name"),
        (lambda b: {**b, "colour": "green"}, 400, "unknown_field", "colour"),
        (lambda b: {**b, "nmae": "x"}, 400, "unknown_field", "nmae"),
        (lambda b: {k: v for k, v in b.items() if k != "name"}, 400, "field_required", "name"),
        (lambda b: {**b, "token": "fet_0000.nope"}, 401, "enrollment_token_unknown", "token"),
    ],
)
def test_enroll_bad_input(anon_client, mutate, status, code, field):
    _, token = services.enrollment_token_create(roles=["compute"], substrate="native")
    response = anon_client.post(f"{V1}/groves/enroll", mutate(_enroll_body(token)), format="json")
    assert response.status_code == status
    assert response.json()["code"] == code
    assert response.json().get("field") == field
    assert not Grove.objects.exists()


def test_enroll_malformed_json_and_used_token(anon_client):
    response = anon_client.post(f"{V1}/groves/enroll", data="{not json", content_type="application/json")
    assert response.status_code == 400 and response.json()["code"] == "malformed_json"
    _, token = services.enrollment_token_create(roles=["compute"], substrate="native")
    assert anon_client.post(f"{V1}/groves/enroll", _enroll_body(token), format="json").status_code == 201
    again = anon_client.post(f"{V1}/groves/enroll", _enroll_body(token), format="json")
    assert again.status_code == 410 and again.json()["code"] == "enrollment_token_used"


def test_heartbeat_happy_path(enroll, grove_client):
    grove, credential = enroll()
    response = grove_client(credential).post(f"{V1}/groves/{grove.id}/heartbeat",
                                             heartbeat_body(gpus=1, log_tail=["started"]), format="json")
    assert response.status_code == 200, response.json()
    assert set(response.json()) == {"server_time", "stale_after_s"}
    grove.refresh_from_db()
    assert grove.log_tail == ["started"] and grove.accelerators.count() == 1 and not grove.stale


def _with(path: str, value):
    def mutate(body):
        body = json.loads(json.dumps(body))
        target = body
        keys = path.split(".")
        for key in keys[:-1]:
            target = target[int(key)] if key.isdigit() else target[key]
        last = keys[-1]
        if last.isdigit():
            target[int(last)] = value
        else:
            target[last] = value
        return body
    return mutate


@pytest.mark.parametrize(
    ("mutate", "code", "field"),
    [
        (_with("capacity.placement_units.0.cpu_milli.allocatable", -1), "out_of_range",
         "capacity.placement_units[0].cpu_milli.allocatable"),
        (_with("capacity.placement_units.0.memory_bytes.allocatable", 10**30), "out_of_range",
         "capacity.placement_units[0].memory_bytes.allocatable"),
        (_with("capacity.placement_units.0.cpu_milli.free", 10**6), "free_exceeds_allocatable",
         "capacity.placement_units[0].cpu_milli.free"),
        (_with("capacity.placement_units.0.cpu_milli.allocatable", "8000"), "invalid_type",
         "capacity.placement_units[0].cpu_milli.allocatable"),
        (_with("capacity.placement_units.0.cpu_milli.allocatable", True), "invalid_type",
         "capacity.placement_units[0].cpu_milli.allocatable"),
        (_with("capacity.accelerators.1.id", "GPU-0"), "duplicate_inventory_id", "capacity.accelerators[1].id"),
        (_with("capacity.placement_units.0.accelerators.0.inventory_id", "GPU-9"), "unknown_inventory_id",
         "capacity.placement_units[0].accelerators[0].inventory_id"),
        (_with("capacity.accelerators.0.memory_kind", "shared"), "invalid_choice",
         "capacity.accelerators[0].memory_kind"),
        (_with("change_kinds", ["k8s.job"]), "change_kind_not_for_substrate", "change_kinds[0]"),
        (_with("change_kinds", ["native.teleport"]), "invalid_choice", "change_kinds[0]"),
        (_with("capacity", []), "invalid_type", "capacity"),
        (_with("log_tail", "not a list"), "invalid_type", "log_tail"),
        (_with("extra", 1), "unknown_field", "extra"),
    ],
)
def test_heartbeat_bad_input_is_refused_and_nothing_changes(fresh_grove, grove_client, mutate, code, field):
    grove, credential = fresh_grove(gpus=2)
    digest = grove.capacity_digest
    units = list(PlacementUnit.objects.values_list("id", flat=True))
    response = grove_client(credential).post(f"{V1}/groves/{grove.id}/heartbeat",
                                             mutate(heartbeat_body(gpus=2)), format="json")
    assert response.status_code == 400, response.json()
    assert response.json()["code"] == code
    assert response.json()["field"] == field
    grove.refresh_from_db()
    assert grove.capacity_digest == digest
    assert list(PlacementUnit.objects.values_list("id", flat=True)) == units


def test_heartbeat_for_another_grove_is_forbidden(enroll, grove_client):
    _mine, credential = enroll(name="mine")
    theirs, _ = enroll(name="theirs")
    response = grove_client(credential).post(f"{V1}/groves/{theirs.id}/heartbeat", heartbeat_body(),
                                             format="json")
    assert response.status_code == 403 and response.json()["code"] == "grove_mismatch"
    theirs.refresh_from_db()
    assert theirs.last_heartbeat_at is None


def test_revoked_unknown_and_missing_credentials(enroll, grove_client, anon_client):
    grove, credential = enroll()
    url = f"{V1}/groves/{grove.id}/heartbeat"
    services.grove_credential_revoke(credential=grove.credentials.get())
    response = grove_client(credential).post(url, heartbeat_body(), format="json")
    assert response.status_code == 401 and response.json()["code"] == "credential_revoked"
    response = grove_client("fgc_deadbeef.nope").post(url, heartbeat_body(), format="json")
    assert response.status_code == 401 and response.json()["code"] == "credential_unknown"
    response = anon_client.post(url, heartbeat_body(), format="json")
    assert response.status_code == 401 and response.json()["code"] == "not_authenticated"


def test_oversized_body_is_refused(fresh_grove, grove_client, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    grove, credential = fresh_grove()
    body = heartbeat_body(log_tail=["x" * 3000] * 10)
    response = grove_client(credential).post(f"{V1}/groves/{grove.id}/heartbeat", body, format="json")
    assert response.status_code == 413 and response.json()["code"] == "payload_too_large"
    grove.refresh_from_db()
    assert grove.log_tail == []


def test_grove_credentials_do_not_open_the_staff_api(fresh_grove, grove_client):
    _grove, credential = fresh_grove()
    assert grove_client(credential).get(f"{V1}/groves").status_code == 401


def test_staff_list_and_detail(fresh_grove, staff_client, anon_client, django_assert_max_num_queries):
    for n in range(3):
        fresh_grove(name=f"box {n}", gpus=n)
    assert anon_client.get(f"{V1}/groves").status_code == 401
    with django_assert_max_num_queries(6):
        response = staff_client.get(f"{V1}/groves?page_size=2")
    body = response.json()
    assert response.status_code == 200 and body["count"] == 3 and len(body["results"]) == 2 and body["next"]
    item = body["results"][0]
    assert {"id", "name", "substrate", "roles", "platforms", "change_kinds", "last_heartbeat_at", "stale",
            "capacity"} <= set(item)
    assert item["stale"] is False
    detail = staff_client.get(f"{V1}/groves/{body['results'][1]['id']}").json()
    assert detail["capacity"]["accelerators"][0]["memory_kind"] == "dedicated"
    assert staff_client.get(f"{V1}/groves/00000000-0000-0000-0000-000000000000").json()["code"] == "not_found"


def test_openapi_schema_documents_wire_endpoints(anon_client):
    response = anon_client.get("/api/schema/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    paths = json.loads(response.content)["paths"]
    assert "/api/forest/v1/groves/enroll" in paths
    assert "/api/forest/v1/groves/{grove_id}/heartbeat" in paths
    assert "/api/forest/v1/groves" in paths


def test_the_wire_request_bodies_are_their_declarations(anon_client):
    """Enrollment, heartbeat and job report: each OpenAPI request body is its declaration's (exact keys)."""
    schema = json.loads(anon_client.get("/api/schema/", HTTP_ACCEPT="application/json").content)
    declared = {"/api/forest/v1/groves/enroll": EnrollRequest,
                "/api/forest/v1/groves/{grove_id}/heartbeat": HeartbeatRequest,
                "/api/forest/v1/groves/{grove_id}/jobs/{job_id}/report": JobReport}
    for path, model in declared.items():
        ref = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        component = schema["components"]["schemas"][ref.rsplit("/", 1)[-1]]
        assert set(component["properties"]) == set(model.model_fields), path
        assert component["additionalProperties"] is False, path
        if model is EnrollRequest:
            platforms = component["properties"]["platforms"]
            assert (platforms["minItems"], platforms["maxItems"]) == (1, MAX_PLATFORMS)


def test_an_unchanged_heartbeat_is_one_statement(fresh_grove, grove_client, django_assert_num_queries):
    grove, credential = fresh_grove(gpus=1)
    client = grove_client(credential)
    body = heartbeat_body(gpus=1, log_tail=["still here"])
    with django_assert_num_queries(1):
        response = client.post(f"{V1}/groves/{grove.id}/heartbeat", body, format="json")
    assert response.status_code == 200
    grove.refresh_from_db()
    assert grove.log_tail == ["still here"]


def test_the_fast_path_still_refuses_revoked_and_foreign_credentials(fresh_grove, grove_client):
    """Unchanged capacity takes the one-statement path; a bad credential must still get its own code."""
    mine, credential = fresh_grove(name="mine")
    theirs, their_credential = fresh_grove(name="theirs")
    body = heartbeat_body()  # the same report both Groves already made: digests match
    foreign = grove_client(their_credential).post(f"{V1}/groves/{mine.id}/heartbeat", body, format="json")
    assert foreign.status_code == 403 and foreign.json()["code"] == "grove_mismatch"
    services.grove_credential_revoke(credential=mine.credentials.get())
    before = Grove.objects.get(pk=mine.pk).last_heartbeat_at
    revoked = grove_client(credential).post(f"{V1}/groves/{mine.id}/heartbeat", body, format="json")
    assert revoked.status_code == 401 and revoked.json()["code"] == "credential_revoked"
    assert Grove.objects.get(pk=mine.pk).last_heartbeat_at == before
    assert theirs.pk != mine.pk
