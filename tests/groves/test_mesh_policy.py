"""Issue 33: the mesh is a set of addresses the operator owns. Over real HTTP against a live Host: a
reported mesh address is a strict IP literal inside ``FOREST_MESH_NETWORKS``, never the edge's own or one of
Host's service addresses, unique among live Groves (a second claimant: 409 and an audit event); the proxy
port is bounded. A refused heartbeat changes nothing else in the database. And a malformed body never
reaches the statement other Groves' heartbeats share."""
from __future__ import annotations

import httpx
import pytest
from django.utils import timezone

from apps.accounts.models import AuditEvent
from apps.groves import services
from apps.groves.mesh import MeshPolicy, MeshRefused, check_address, parse_address
from apps.groves.models import Grove
from tests.factories import heartbeat_body
from tests.fingerprint import changed_tables, table_fingerprint

V1 = "/api/forest/v1"


@pytest.fixture
def mesh_settings(settings):
    settings.FOREST_MESH_NETWORKS = ["10.8.0.0/24", "fd00::/8"]
    settings.FOREST_EDGE_PROXY_BIND = "10.8.0.1"
    settings.FOREST_OWN_SERVICE_URLS = ["postgres://forest@10.8.0.2:5432/forest", "redis://[fd00::2]:6379/0",
                                        "http://host.internal:8000"]
    settings.FOREST_MESH_RESERVED = ["10.8.0.3"]
    settings.FOREST_MESH_PROXY_PORTS = "1024-65535"


def _beat(address, port=8480):
    return {**heartbeat_body(), "mesh": {"address": address, "proxy_port": port}}


def _post(live_server, grove, credential, body) -> httpx.Response:
    return httpx.post(f"{live_server.url}{V1}/groves/{grove.pk}/heartbeat", json=body, timeout=15,
                      headers={"Authorization": f"Bearer {credential}"})


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("address", "port", "code"), [
    ("fd00:77::5%eth0", 8480, "mesh_address_invalid"),  # a zone id (was a 500 that broke the shared statement)
    ("::ffff:10.8.0.5", 8480, "mesh_address_invalid"),  # IPv4-mapped
    ("::10.8.0.5", 8480, "mesh_address_invalid"),  # IPv4-compatible
    ("mac.mesh.example", 8480, "mesh_address_invalid"),
    ("10.8.0.1", 5432, "mesh_address_reserved"),  # the edge's own proxy bind
    ("10.8.0.2", 8480, "mesh_address_reserved"),  # Host's database
    ("fd00::2", 8480, "mesh_address_reserved"),  # Host's broker
    ("10.8.0.3", 8480, "mesh_address_reserved"),  # FOREST_MESH_RESERVED
    ("10.8.1.5", 8480, "mesh_address_outside_range"),
    ("10.8.0.5", 22, "mesh_port_out_of_range"),
])
def test_a_mesh_outside_the_operators_set_is_refused_and_nothing_changes(live_server, fresh_grove, mesh_settings,
                                                                          address, port, code):
    grove, credential = fresh_grove()
    before = table_fingerprint()
    response = _post(live_server, grove, credential, _beat(address, port))
    assert response.status_code == 400, response.text
    assert response.json()["code"] == code
    assert changed_tables(before, table_fingerprint()) == []


@pytest.mark.django_db(transaction=True)
def test_a_second_live_claimant_is_refused_with_an_audit_event(live_server, fresh_grove, mesh_settings):
    first, first_credential = fresh_grove(name="first")
    second, second_credential = fresh_grove(name="second")
    assert _post(live_server, first, first_credential, _beat("10.8.0.5")).status_code == 200
    assert _post(live_server, second, second_credential, _beat("10.8.0.6")).status_code == 200
    before = table_fingerprint()
    taken = _post(live_server, second, second_credential, _beat("10.8.0.5", 9000))
    assert (taken.status_code, taken.json()["code"], taken.json()["field"]) == (409, "mesh_address_taken",
                                                                                 "mesh.address")
    # Only the audit trail moved: the claimant keeps its old address, the holder its own.
    assert changed_tables(before, table_fingerprint()) == ["accounts_auditevent"]
    event = AuditEvent.objects.get(action=services.MESH_TAKEN_ACTION)
    assert event.detail["held_by"] == "first" and event.target_id == str(second.pk)
    assert Grove.objects.get(pk=second.pk).mesh_address == "10.8.0.6"
    assert Grove.objects.get(pk=first.pk).mesh_address == "10.8.0.5"
    # A holder gone stale loses the address to the next claimant; when it returns it must claim again.
    Grove.objects.filter(pk=first.pk).update(stale_since=timezone.now())
    assert _post(live_server, second, second_credential, _beat("10.8.0.5")).status_code == 200
    assert Grove.objects.get(pk=first.pk).mesh_address is None
    Grove.objects.filter(pk=first.pk).update(stale_since=None)
    back = _post(live_server, first, first_credential, _beat("10.8.0.5"))
    assert (back.status_code, back.json()["code"]) == (409, "mesh_address_taken")


@pytest.mark.django_db
def test_a_malformed_body_never_joins_the_shared_statement(fresh_grove, mesh_settings):
    """The lean route batches heartbeats into one statement: each body is validated before it becomes a row
    (``heartbeat_fast_row``), so a bad one goes to Django on its own and the good ones in its batch land."""
    groves = [fresh_grove(name=f"g{i}") for i in range(3)]
    bodies = [heartbeat_body(), _beat("fd00:77::5%eth0"), heartbeat_body()]
    rows = [services.heartbeat_fast_row(grove_id=grove.pk, presented=credential, body=body)
            for (grove, credential), body in zip(groves, bodies, strict=True)]
    assert rows[1] is None  # refused before batching
    written = services.heartbeat_rows_run([row for row in rows if row is not None])
    assert set(written) == {str(groves[0][0].pk), str(groves[2][0].pk)}


@pytest.mark.parametrize("literal", ["fd00::5%eth0", "::ffff:10.0.0.1", "::10.0.0.1", "2002:a00:1::1", "0.0.0.0",
                                     "fe80::1", "224.0.0.1", "10.0.0.1 ", "010.0.0.1", "", "x" * 80])
def test_the_parser_is_strict(literal):
    with pytest.raises(MeshRefused) as refused:
        parse_address(literal)
    assert refused.value.code == "mesh_address_invalid"


def test_the_canonical_spelling_is_stored():
    policy = MeshPolicy(networks=("fd00::/8",))
    assert check_address("FD00:0077:0000::0005", policy) == "fd00:77::5"

