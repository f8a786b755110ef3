"""The lean wire routes take what Django's middleware gives a request from the same definitions
(apps/dispatch/api/lean.py ``MIDDLEWARE_COVERAGE``): every MIDDLEWARE entry is applied or waived in writing,
the request id is Django's rule and reaches the services' context, and the security headers are the ones
Django's own middleware sends. Real ASGI application over httpx's ASGI transport, real PostgreSQL."""
from __future__ import annotations

import pytest
from django.conf import settings

from apps.core import context
from apps.dispatch import services as dispatch_services
from apps.dispatch.api import lean
from tests.dispatch.test_lean import V1, _job, _runner, loop, post, served  # noqa: F401  (fixtures)
from tests.factories import heartbeat_body

pytestmark = pytest.mark.django_db(transaction=True)
SECURITY = {"x-frame-options", "x-content-type-options", "referrer-policy", "cross-origin-opener-policy",
            "strict-transport-security"}


def test_every_middleware_entry_is_applied_or_waived_in_writing():
    assert list(lean.MIDDLEWARE_COVERAGE) == list(settings.MIDDLEWARE), (
        "MIDDLEWARE changed: say in lean.MIDDLEWARE_COVERAGE how the lean wire routes apply or waive it")
    for entry, how in lean.MIDDLEWARE_COVERAGE.items():
        assert how.split(":", 1)[0] in {"applied", "waived"} and len(how) > len("applied: x"), entry


def test_lean_answers_carry_the_callers_request_id_or_a_fresh_one(fresh_grove):
    grove, credential = fresh_grove()
    body = heartbeat_body()
    before = served("heartbeat", "served")
    first = post(f"{V1}/groves/{grove.id}/heartbeat", credential=credential, body=body)
    assert first.status_code == 200 and served("heartbeat", "served") == before + 1
    assert len(first.headers["x-request-id"]) == 32

    import asyncio

    import httpx

    from forest_host.asgi import application

    async def with_id(request_id: str) -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=application),
                                     base_url="http://testserver") as client:
            return await client.post(f"{V1}/groves/{grove.id}/heartbeat", json=body,
                                     headers={"Authorization": f"Bearer {credential}", "X-Request-ID": request_id})

    assert asyncio.run(with_id("ci-run-42")).headers["x-request-id"] == "ci-run-42"
    assert asyncio.run(with_id("bad id\twith spaces")).headers["x-request-id"] != "bad id\twith spaces"


def test_security_headers_are_djangos_on_both_routes(fresh_grove, settings):
    grove, credential = fresh_grove()
    lean_answer = post(f"{V1}/groves/{grove.id}/heartbeat", credential=credential, body=heartbeat_body())
    settings.FOREST_LEAN_WIRE = False
    django_answer = post(f"{V1}/groves/{grove.id}/heartbeat", credential=credential, body=heartbeat_body())
    assert lean_answer.status_code == django_answer.status_code == 200
    ours = {k: v for k, v in lean_answer.headers.items() if k in SECURITY}
    theirs = {k: v for k, v in django_answer.headers.items() if k in SECURITY}
    assert ours == theirs and ours["x-frame-options"] == "DENY"


def test_a_changed_setting_changes_the_lean_headers_too(fresh_grove, settings):
    from apps.core.middleware import security_headers

    settings.SECURE_REFERRER_POLICY = "no-referrer"
    security_headers.cache_clear()
    try:
        grove, credential = fresh_grove()
        answer = post(f"{V1}/groves/{grove.id}/heartbeat", credential=credential, body=heartbeat_body())
        assert answer.headers["referrer-policy"] == "no-referrer"
    finally:
        settings.SECURE_REFERRER_POLICY = "same-origin"
        security_headers.cache_clear()


def test_the_request_id_reaches_the_services_on_a_lean_report(fresh_grove, monkeypatch):
    grove, credential = fresh_grove()
    job = _job(grove, 7)
    seen: list[str] = []
    real = dispatch_services.grove_job_claim

    def claim(**kwargs):
        seen.append(context.request_id.get())
        return real(**kwargs)

    monkeypatch.setattr(dispatch_services, "grove_job_claim", claim)
    before = served("claim", "served")
    import asyncio

    import httpx

    from forest_host.asgi import application

    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=application),
                                     base_url="http://testserver") as client:
            return await client.post(f"{V1}/groves/{grove.id}/jobs/{job.id}/claim", json={},
                                     headers={"Authorization": f"Bearer {credential}", "X-Request-ID": "claim-1"})

    answer = asyncio.run(go())
    assert answer.status_code == 200 and served("claim", "served") == before + 1
    assert answer.headers["x-request-id"] == "claim-1" and seen == ["claim-1"]

