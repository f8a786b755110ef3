"""Route derivation and the edge's record of routes, against real PostgreSQL."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.accounts.models import AuditEvent
from apps.flags.services import flag_override_set
from apps.groves import services as grove_services
from apps.groves.models import Grove
from apps.ingress import services
from apps.ingress.models import IngressRoute
from apps.ingress.selectors import routes_desired
from apps.workloads.models import NativeWorkload
from apps.workloads.services import native_workload_delete
from tests.factories import heartbeat_body
from tests.ingress.conftest import FLAG

pytestmark = pytest.mark.django_db


def _names() -> list[str]:
    return sorted(route.hostname for route in routes_desired())


def test_only_live_generations_on_fresh_groves_with_a_mesh_get_routes(mesh_grove, live_workload, ingress_on,
                                                                     fresh_grove):
    mac = mesh_grove()
    live_workload("shop", mac, ["shop.apps.example.com", "www.shop.apps.example.com"])
    live_workload("draft", mac, ["draft.apps.example.com"], live=False)
    bare, _ = fresh_grove(name="no-mesh", roles=("runtime",), change_kinds=["native.workload"])
    live_workload("hidden", bare, ["hidden.apps.example.com"])
    (route, _) = sorted(routes_desired(), key=lambda r: r.hostname)
    assert (route.hostname, route.workload_slug, route.upstream_address, route.upstream_port, route.path_prefix) == (
        "shop.apps.example.com", "shop", "10.8.0.5", 8480, "/")
    assert _names() == ["shop.apps.example.com", "www.shop.apps.example.com"]
    # A stale Grove: its routes go.
    Grove.objects.filter(pk=mac.pk).update(last_heartbeat_at=timezone.now() - timedelta(hours=1))
    assert _names() == []


def test_the_flag_gates_routes_per_environment_and_team(mesh_grove, live_workload):
    mac = mesh_grove()
    flag_override_set(name=FLAG, enabled=True, reason="test")  # on while generations are written
    live_workload("shop", mac, ["shop.apps.example.com"])
    live_workload("blog", mac, ["blog.apps.example.com"], team="ml")
    flag_override_set(name=FLAG, enabled=False, reason="test")
    assert _names() == []
    flag_override_set(name=FLAG, enabled=True, reason="test", scope="team", scope_value="ml")
    assert _names() == ["blog.apps.example.com"]


def test_a_generation_written_with_the_flag_off_carries_no_ingress(mesh_grove, live_workload):
    live_workload("shop", mesh_grove(), ["shop.apps.example.com"])
    flag_override_set(name=FLAG, enabled=True, reason="test")
    assert _names() == []  # the agent was never told to serve the name: re-apply after turning the flag on


def test_sync_records_appearing_changing_and_going_routes_with_audit_events(mesh_grove, live_workload, ingress_on):
    mac = mesh_grove()
    live_workload("shop", mac, ["shop.apps.example.com"], team="web")
    (row,) = services.routes_sync(routes_desired())
    assert (row.hostname, row.state, row.team, row.upstream) == ("shop.apps.example.com", "pending", "web",
                                                                 "10.8.0.5:8480")
    services.routes_sync(routes_desired())  # idempotent: no second event
    appeared = AuditEvent.objects.get(action="ingress.route_appeared")
    assert (appeared.target_id, appeared.team, appeared.actor_label, appeared.via) == (
        "shop.apps.example.com", "web", "forest-edge", "command")
    assert appeared.detail["upstream"] == "10.8.0.5:8480"
    IngressRoute.objects.filter(pk=row.pk).update(state="serving")
    # The Grove moves on the mesh: the route follows it and waits for the edge again.
    grove_services.grove_heartbeat_record(grove=mac, body={**heartbeat_body(change_kinds=["native.workload"]),
                                                           "mesh": {"address": "10.8.0.6", "proxy_port": 8480}})
    (row,) = services.routes_sync(routes_desired())
    assert (row.upstream, row.state) == ("10.8.0.6:8480", "pending")
    native_workload_delete(workload=NativeWorkload.objects.get(slug="shop"))
    assert services.routes_sync(routes_desired()) == []
    assert not IngressRoute.objects.exists()
    assert AuditEvent.objects.filter(action="ingress.route_gone", target_id="shop.apps.example.com").count() == 1
