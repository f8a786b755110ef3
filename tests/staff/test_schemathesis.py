"""Property-based fuzzing of the staff read API and the plan preview from the OpenAPI schema: no input
yields a 5xx, and every error is in the one error shape. Live Host server, real HTTP, PostgreSQL, a staff
token, the observability flag on."""
from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from apps.flags.services import flag_override_set
from tests.factories import api_token_for


@pytest.mark.django_db(transaction=True)
def test_staff_and_plan_endpoints_never_answer_5xx(live_server, staff_user, fresh_grove):
    fresh_grove(name="gpu", gpus=1)
    flag_override_set(name="host.staff.execution_observability", enabled=True, reason="fuzz")
    token = api_token_for(staff_user)
    schema = schemathesis.openapi.from_url(f"{live_server.url}/api/schema/?format=json").include(tag="staff")
    plan = schemathesis.openapi.from_url(f"{live_server.url}/api/schema/?format=json").include(tag="plan")
    operations = [result.ok() for result in [*schema.get_all_operations(), *plan.get_all_operations()]]
    assert {op.path for op in operations} >= {"/api/forest/v1/staff/placements", "/api/forest/v1/plan"}

    for operation in operations:
        @given(case=operation.as_strategy())
        @settings(max_examples=30, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
        def exercise(case):
            response = case.call(base_url=live_server.url, headers={"Authorization": f"Token {token}"})
            assert response.status_code < 500, response.text
            if response.status_code >= 400:
                body = response.json()
                assert "code" in body and "detail" in body, response.text

        exercise()
