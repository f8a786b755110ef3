"""Property-based fuzzing of the Grove wire endpoints from the OpenAPI schema: no input yields a 5xx, and
every documented response matches its schema.

Schemathesis loads /api/schema/ from a live Host server, generates bodies (valid and invalid) for each
operation tagged ``wire`` and sends them over real HTTP against PostgreSQL, with a real Grove credential
so requests get past authentication and reach validation.
"""
from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import response_schema_conformance

from apps.groves import services
from tests.factories import heartbeat_body


@pytest.mark.django_db(transaction=True)
def test_wire_endpoints_never_answer_5xx(live_server):
    _, token = services.enrollment_token_create(roles=["compute"], substrate="native")
    grove, credential = services.grove_enroll(body={"token": token, "name": "fuzz", "substrate": "native",
                                                    "platforms": ["linux/amd64"]})
    services.grove_heartbeat_record(grove=grove, body=heartbeat_body())
    schema = schemathesis.openapi.from_url(f"{live_server.url}/api/schema/?format=json").include(tag="wire")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/api/forest/v1/groves/enroll",
                                              "/api/forest/v1/groves/{grove_id}/heartbeat"}
    seen_statuses: set[int] = set()

    for operation in operations:
        @given(case=operation.as_strategy())
        @settings(max_examples=60, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
        def exercise(case):
            if case.path_parameters and "grove_id" in case.path_parameters:
                case.path_parameters["grove_id"] = str(grove.id)
            response = case.call(base_url=live_server.url, headers={"Authorization": f"Bearer {credential}"})
            seen_statuses.add(response.status_code)
            assert response.status_code < 500, response.text
            case.validate_response(response, checks=[response_schema_conformance])
            if response.status_code >= 400:
                assert "code" in response.json(), response.text

        exercise()
    assert any(status >= 400 for status in seen_statuses)
