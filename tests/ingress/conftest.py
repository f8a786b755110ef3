"""Ingress fixtures: a native Grove that reports a mesh address, and workloads with a live generation."""
from __future__ import annotations

import pytest

from apps.flags.services import flag_override_set
from apps.groves import services as grove_services
from apps.workloads import services as workload_services
from tests.factories import heartbeat_body
from tests.workloads.test_services import bundle  # noqa: F401

FLAG = "host.deploy.native_ingress"


@pytest.fixture(autouse=True)
def ingress_settings(settings):
    settings.FOREST_MESH_NETWORKS = ["10.8.0.0/24"]
    settings.FOREST_INGRESS_DOMAINS = ["apps.example.com"]
    settings.FOREST_NATIVE_WORKLOAD_DISPATCH = True


@pytest.fixture
def ingress_on():
    flag_override_set(name=FLAG, enabled=True, reason="test")


@pytest.fixture
def mesh_grove(fresh_grove):
    """A native Grove at 10.8.0.5, ingress proxy on 8480."""
    def _make(name="mac", address="10.8.0.5"):
        grove, _ = fresh_grove(name=name, roles=("runtime", "compute"), change_kinds=["native.workload"])
        body = {**heartbeat_body(change_kinds=["native.workload"]), "mesh": {"address": address, "proxy_port": 8480}}
        return grove_services.grove_heartbeat_record(grove=grove, body=body)
    return _make


@pytest.fixture
def live_workload(bundle):  # noqa: F811
    """Apply a workload with ingress host names and report its generation live from its Grove."""
    def _make(slug, grove, hostnames, *, team="", live=True, path_prefix="/"):
        _, generation = workload_services.native_workload_apply(body={
            "slug": slug, "bundle_digest": bundle.digest, "command": ["./server"], "grove": grove.slug,
            "team": team, "ports": [{"name": "http", "port": 8080}],
            "ingress": {"hostnames": hostnames, "port": 8080, "path_prefix": path_prefix}})
        if live:
            workload_services.workload_status_record(grove=grove, generation_id=generation.pk,
                                                     body={"state": "live", "live": True})
        return generation
    return _make
