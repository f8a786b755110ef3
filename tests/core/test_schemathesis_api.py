"""Property-based fuzzing of every operation in /api/schema/ over real HTTP: no input yields a 5xx, every
refusal has the error shape, every documented response matches its schema, and a refused call changes no
row of any table.

Schemathesis loads the schema from a live Host server and generates requests (valid and invalid) for each
operation, sent with a staff admin's API token — or, on the Grove wire operations, the Grove's own
credential — so they get past authentication and reach the body reader, validation and services.
Examples per operation are bounded (``FOREST_FUZZ_EXAMPLES``, default 8) to fit the suite's budget;
``make fuzz`` runs the same test with many more.
"""
from __future__ import annotations

import os

import pytest
import schemathesis
from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import response_schema_conformance

from apps.artifacts.models import Artifact
from apps.flags.services import flag_override_set
from apps.groves import services as grove_services
from apps.staff.views import FLAG as STAFF_API_FLAG
from tests.factories import api_token_for
from tests.fingerprint import changed_tables, table_fingerprint

EXAMPLES = int(os.environ.get("FOREST_FUZZ_EXAMPLES", "8"))


def _auth(operation, *, token: str, credential: str) -> dict:
    schemes = {name for entry in (operation.definition.raw.get("security") or [{}]) for name in entry}
    if "groveCredential" in schemes and "apiToken" not in schemes:
        return {"Authorization": f"Bearer {credential}"}
    if "apiToken" in schemes:
        return {"Authorization": f"Token {token}"}
    return {}


@pytest.mark.django_db(transaction=True)
@override_settings(GROVE_POLL_STAMP_S=10**9)
def test_every_operation_never_answers_5xx_and_refusals_change_nothing(live_server, staff_user, fresh_grove):
    # Compute endpoints should reach validation, not the flag's refusal.
    flag_override_set(name="host.deploy.forest_compute_jobs", enabled=True, reason="fuzz")
    flag_override_set(name=STAFF_API_FLAG, enabled=True, reason="fuzz")  # the staff API answers, not 404
    grove, credential = fresh_grove(name="fuzz")
    # A claim, won or lost, stamps the Grove's readiness (apps.dispatch.services.grove_job_claim: the executor
    # is at work), at most once per GROVE_POLL_STAMP_S; a liveness stamp like a heartbeat, not state a refusal
    # changed. Stamp it now and not again during the run, so "refusals change nothing" stays exact.
    grove_services.grove_poll_record(grove=grove)
    token = api_token_for(staff_user, "fuzz")
    schema = schemathesis.openapi.from_url(f"{live_server.url}/api/schema/?format=json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 25, [op.path for op in operations]
    seen_statuses: set[int] = set()
    # The fingerprint before the next call: refreshed only after a call that was accepted (and may write).
    state = {"fingerprint": table_fingerprint()}

    def exercise_operation(operation) -> None:
        headers = _auth(operation, token=token, credential=credential)

        @given(case=operation.as_strategy())
        @settings(max_examples=EXAMPLES, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                         HealthCheck.data_too_large])
        def exercise(case):
            if case.path_parameters and "grove_id" in case.path_parameters:
                case.path_parameters["grove_id"] = str(grove.id)
            if operation.path.endswith("/changes"):
                case.query = {**(case.query or {}), "wait": "0"}  # never hold a long-poll open
            response = case.call(base_url=live_server.url, headers=headers)
            seen_statuses.add(response.status_code)
            where = f"{operation.method.upper()} {operation.path}: {response.status_code} {response.text[:300]}"
            assert response.status_code < 500, where
            # Every documented response matches its schema (the schema is what clients are generated from).
            case.validate_response(response, checks=[response_schema_conformance])
            after = table_fingerprint()
            if response.status_code >= 400:
                if response.headers.get("Content-Type", "").startswith("application/json"):
                    assert "code" in response.json(), where
                assert changed_tables(state["fingerprint"], after) == [], where
            state["fingerprint"] = after

        exercise()

    # Every list and read operation with what the fuzzing may miss in its few examples: a row with the
    # nullable fields null (an artifact Host recorded itself has no uploader) and the staff pages on.
    Artifact.objects.create(digest="sha256:" + "ab" * 32, storage_kind="cas", reference="cas/ab")
    for operation in operations:
        if operation.method.upper() == "GET" and "{" not in operation.path:
            case = operation.Case(query={"wait": "0"} if operation.path.endswith("/changes") else {})
            response = case.call(base_url=live_server.url, headers=_auth(operation, token=token,
                                                                         credential=credential))
            assert response.status_code < 400, f"GET {operation.path}: {response.status_code} {response.text[:300]}"
            case.validate_response(response, checks=[response_schema_conformance])
    state["fingerprint"] = table_fingerprint()

    for operation in operations:
        exercise_operation(operation)
    assert any(status >= 400 for status in seen_statuses) and any(status < 300 for status in seen_statuses)
