"""Issue 38: a workload declares its stop grace (``stop_grace_s``). Validated with a coded 400, stored, put in
the generation both ``changes`` routes send (and parsed by the agent's own wire reader), bounded on each side of
the wire and held alike here; a workload that declares none keeps its spec digest, so the upgrade
writes no new generation."""
from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction
from forest_agent.wire.messages import Generation, MessageInvalid

from apps.core.errors import ValidationFailed
from apps.workloads import rules, services
from apps.workloads.models import NativeWorkload, WorkloadGeneration
from apps.workloads.selectors import grove_workloads
from apps.workloads.vocabulary import MAX_STOP_GRACE_S, MIN_STOP_GRACE_S
from tests.workloads.test_services import _public_domains, _spec, bundle, dispatch_on, native_grove  # noqa: F401

pytestmark = pytest.mark.django_db
V1 = "/api/forest/v1"


@pytest.fixture
def token():
    services.workload_secret_set(team="", environment="default", name="API_TOKEN", value="x")


def _agent_accepts(grace) -> bool:
    wire = {"generation_id": "g", "workload": "web", "generation": 1, "command": ["./x"], "stop_grace_s": grace,
            "bundle": {"url": "u", "digest": "sha256:" + "a" * 64, "signature": "s", "key_id": "k"}}
    try:
        return Generation.parse(wire).stop_grace_s == grace
    except MessageInvalid:
        return False


def _host_accepts(grace) -> bool:
    try:
        return rules.workload_spec({"slug": "web", "bundle_digest": "d", "command": ["./x"],
                                    "stop_grace_s": grace})["stop_grace_s"] == grace
    except ValidationFailed:
        return False


@pytest.mark.parametrize("grace", [-1, 0, MIN_STOP_GRACE_S, 30, MAX_STOP_GRACE_S, MAX_STOP_GRACE_S + 1])
def test_host_accepts_exactly_the_graces_the_agent_reads_at_the_bounds(grace):
    """Host and agent may not import each other: each bounds the field itself, and this holds them alike (Host
    sends whole seconds only, so the agent's fractions are not compared)."""
    assert _host_accepts(grace) == _agent_accepts(grace)
    assert _host_accepts(grace) == (MIN_STOP_GRACE_S <= grace <= MAX_STOP_GRACE_S)


@pytest.mark.parametrize(("value", "code"), [
    (0, "out_of_range"), (MAX_STOP_GRACE_S + 1, "out_of_range"), ("30", "invalid_type"), (True, "invalid_type"),
    (1.5, "invalid_type"),
])
def test_a_grace_out_of_bounds_is_a_coded_400_and_writes_nothing(staff_client, bundle, native_grove,  # noqa: F811
                                                                 dispatch_on, token, value, code):  # noqa: F811
    response = staff_client.post(f"{V1}/workloads", _spec(bundle, stop_grace_s=value), format="json")
    assert response.status_code == 400, response.json()
    assert response.json() == {"code": code, "detail": response.json()["detail"], "field": "stop_grace_s"}
    assert not NativeWorkload.objects.exists() and not WorkloadGeneration.objects.exists()


@pytest.mark.parametrize("value", [MIN_STOP_GRACE_S, 5, MAX_STOP_GRACE_S])
def test_a_grace_within_bounds_is_stored_answered_and_sent(staff_client, bundle, native_grove, dispatch_on,  # noqa: F811
                                                           token, grove_client, value):
    grove, credential = native_grove
    response = staff_client.post(f"{V1}/workloads", _spec(bundle, stop_grace_s=value), format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["stop_grace_s"] == value
    assert NativeWorkload.objects.get(slug="web").stop_grace_s == value
    (item,) = grove_client(credential).get(f"{V1}/groves/{grove.id}/changes?wait=0").json()["workloads"]
    assert item["stop_grace_s"] == value
    assert Generation.parse(item).stop_grace_s == value  # what the agent reads off the wire


def test_without_a_grace_the_generation_leaves_it_to_the_agent(staff_client, bundle, native_grove,  # noqa: F811
                                                               dispatch_on, token, grove_client):  # noqa: F811
    grove, credential = native_grove
    assert staff_client.post(f"{V1}/workloads", _spec(bundle, stop_grace_s=None), format="json").status_code == 200
    assert staff_client.get(f"{V1}/workloads/web").json()["stop_grace_s"] is None
    (item,) = grove_client(credential).get(f"{V1}/groves/{grove.id}/changes?wait=0").json()["workloads"]
    assert "stop_grace_s" not in item and Generation.parse(item).stop_grace_s is None


def test_a_changed_grace_is_a_new_generation(bundle, native_grove, dispatch_on, token):  # noqa: F811
    grove, _ = native_grove
    _, first = services.native_workload_apply(body=_spec(bundle))
    _, second = services.native_workload_apply(body=_spec(bundle, stop_grace_s=30))
    _, same = services.native_workload_apply(body=_spec(bundle, stop_grace_s=30))
    _, third = services.native_workload_apply(body=_spec(bundle, stop_grace_s=5))
    _, fourth = services.native_workload_apply(body=_spec(bundle))  # back to the agent's default
    assert [first.number, second.number, same.number, third.number, fourth.number] == [1, 2, 2, 3, 4]
    assert [g.spec.get("stop_grace_s") for g in (first, second, third, fourth)] == [None, 30, 5, None]
    (payload,), _ = grove_workloads(grove)
    assert payload["generation"] == 4 and "stop_grace_s" not in payload


# The spec and digest Host wrote before ``stop_grace_s`` existed (computed with that code), for a fixed input.
_OLD_WORKLOAD = {"command": ["./bin/server"], "env": {"MODE": "a"}, "secret_refs": ["API_TOKEN"],
                 "secrets_mode": "env", "ports": [{"name": "http", "port": 8080}], "probes": {}, "ingress": None,
                 "restart": rules.DEFAULT_RESTART}
_OLD_BUNDLE = {"digest": "sha256:" + "a" * 64, "size": 10, "signature": "c2ln", "key_id": "release"}
_OLD_DIGEST = "4343a25acb03512b34d1ae914311094afea4a1df302abcc03c91e2bf0972aa5b"


def test_a_spec_without_a_grace_keeps_the_digest_it_had_before_the_field():
    spec = rules.generation_spec(workload={**_OLD_WORKLOAD, "stop_grace_s": None}, bundle=_OLD_BUNDLE,
                                 ingress_enabled=False)
    assert "stop_grace_s" not in spec
    assert rules.spec_digest(spec, {"API_TOKEN": "x"}) == _OLD_DIGEST
    with_grace = rules.generation_spec(workload={**_OLD_WORKLOAD, "stop_grace_s": 10}, bundle=_OLD_BUNDLE,
                                       ingress_enabled=False)
    assert rules.spec_digest(with_grace, {"API_TOKEN": "x"}) != _OLD_DIGEST


def test_an_existing_workload_gets_no_new_generation_from_the_upgrade(bundle, native_grove, dispatch_on,  # noqa: F811
                                                                      token):
    """The generation row is written as the writer wrote it before the field (its spec has no
    ``stop_grace_s``); the workload row's new column is NULL, as the migration leaves it."""
    workload, current = services.native_workload_apply(body=_spec(bundle))
    legacy_spec = {key: value for key, value in current.spec.items() if key != "stop_grace_s"}
    assert set(legacy_spec) == {"bundle", "command", "env", "secret_names", "secrets_mode", "ports", "probes",
                                "ingress", "restart"}
    WorkloadGeneration.objects.filter(pk=current.pk).update(
        spec=legacy_spec, spec_digest=rules.spec_digest(legacy_spec, {"API_TOKEN": "x"}))
    assert NativeWorkload.objects.get(pk=workload.pk).stop_grace_s is None
    assert services.native_workload_generation_write(workload=workload).pk == current.pk
    assert WorkloadGeneration.objects.count() == 1


@pytest.mark.parametrize("grace", [0, MAX_STOP_GRACE_S + 1])
def test_the_database_refuses_a_grace_beyond_the_bounds(bundle, native_grove, dispatch_on, token,  # noqa: F811
                                                        grace):
    workload, _ = services.native_workload_apply(body=_spec(bundle, stop_grace_s=1))
    with pytest.raises(IntegrityError), transaction.atomic():
        NativeWorkload.objects.filter(pk=workload.pk).update(stop_grace_s=grace)


def test_the_schema_declares_the_field_with_its_bounds(anon_client):
    document = anon_client.get("/api/schema/?format=json").json()
    body = document["paths"]["/api/forest/v1/workloads"]["post"]["requestBody"]["content"]["application/json"]
    schema = document["components"]["schemas"]
    declared = schema[body["schema"]["$ref"].rsplit("/", 1)[1]]["properties"]["stop_grace_s"]
    assert (declared["minimum"], declared["maximum"], declared.get("nullable")) == (MIN_STOP_GRACE_S,
                                                                                     MAX_STOP_GRACE_S, True)
    assert "stop_grace_s" in schema["NativeWorkload"]["properties"]
