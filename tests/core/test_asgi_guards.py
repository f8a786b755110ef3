"""The request guards under ASGI (the async middleware branch, as uvicorn serves Host): a NUL in the
long-poll's query string is refused before the view, and a staff write through the async chain is
audited with its request id."""
from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from apps.accounts.models import AuditEvent
from tests.estate import compute_body
from tests.factories import api_token_for


@pytest.mark.django_db(transaction=True)
def test_the_long_poll_refuses_nul_under_asgi(fresh_grove):
    grove, credential = fresh_grove(name="poller")

    async def poll(wait: str):
        return await AsyncClient().get(f"/api/forest/v1/groves/{grove.id}/changes", {"wait": wait},
                                       headers={"Authorization": f"Bearer {credential}"})

    refused = asyncio.run(poll("0\x00"))
    assert refused.status_code == 400
    assert refused.json()["code"] == "nul_character" and refused.json()["field"] == "query.wait"
    assert len(refused["X-Request-ID"]) == 32
    assert asyncio.run(poll("0")).status_code == 200


@pytest.mark.django_db(transaction=True)
def test_writes_through_the_async_chain_are_audited(staff_user, estate):
    token = api_token_for(staff_user, "asgi")

    async def submit():
        return await AsyncClient().post("/api/forest/v1/compute/jobs", compute_body("red", "async"),
                                        content_type="application/json",
                                        headers={"Authorization": f"Token {token}", "X-Request-ID": "asgi-7"})

    response = asyncio.run(submit())
    assert response.status_code == 201, response.content[:300]
    event = asyncio.run(sync_to_async(AuditEvent.objects.get)(action="compute-job-create"))
    assert event.request_id == "asgi-7" and event.target_id == response.json()["id"] and event.team == "red"
