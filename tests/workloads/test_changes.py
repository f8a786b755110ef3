"""Workload generations on the long-poll: sent as the Grove's desired state, news only until reported."""
from __future__ import annotations

import time

import pytest

from tests.workloads.test_services import _public_domains, _spec, bundle, dispatch_on, native_grove  # noqa: F401

pytestmark = pytest.mark.django_db
V1 = "/api/forest/v1"


def test_a_new_generation_ends_the_long_poll_and_a_reported_one_does_not(bundle, native_grove,  # noqa: F811
                                                                            dispatch_on, grove_client):  # noqa: F811
    from apps.workloads import services

    grove, credential = native_grove
    client = grove_client(credential)
    services.workload_secret_set(team="", environment="default", name="API_TOKEN", value="x")
    _, generation = services.native_workload_apply(body=_spec(bundle))
    started = time.monotonic()
    body = client.get(f"{V1}/groves/{grove.id}/changes?wait=5").json()
    assert time.monotonic() - started < 2
    (item,) = body["workloads"]
    assert item["generation_id"] == str(generation.id) and item["secrets"] == {"API_TOKEN": "x"}
    client.post(f"{V1}/groves/{grove.id}/workloads/{generation.id}/status", {"state": "live"}, format="json")
    started = time.monotonic()
    body = client.get(f"{V1}/groves/{grove.id}/changes?wait=1").json()
    assert time.monotonic() - started >= 0.9  # waited: nothing new
    assert [w["generation_id"] for w in body["workloads"]] == [str(generation.id)]  # still the desired state
