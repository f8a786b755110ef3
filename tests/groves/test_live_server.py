"""As an agent would: a plain HTTP client against a live Host server (Django's live_server, PostgreSQL)."""
from __future__ import annotations

import httpx
import pytest

from apps.groves import services
from apps.groves.models import Grove
from tests.factories import heartbeat_body


@pytest.mark.django_db(transaction=True)
def test_enroll_and_heartbeat_over_real_http(live_server):
    _, token = services.enrollment_token_create(roles=["compute"], substrate="native")
    with httpx.Client(base_url=f"{live_server.url}/api/forest/v1", timeout=10) as http:
        enrolled = http.post("/groves/enroll", json={"token": token, "name": "real box", "substrate": "native",
                                                     "platforms": ["linux/amd64"], "version": "1"})
        assert enrolled.status_code == 201
        grove_id, credential = enrolled.json()["grove_id"], enrolled.json()["credential"]
        auth = {"Authorization": f"Bearer {credential}"}
        beat = http.post(f"/groves/{grove_id}/heartbeat", json=heartbeat_body(gpus=1), headers=auth)
        assert beat.status_code == 200 and beat.json()["stale_after_s"] > 0
        bad = http.post(f"/groves/{grove_id}/heartbeat", content=b"{", headers={**auth,
                                                                               "Content-Type": "application/json"})
        assert bad.status_code == 400 and bad.json()["code"] == "malformed_json"
    grove = Grove.objects.get(pk=grove_id)
    assert grove.accelerators.count() == 1 and not grove.stale
