"""A native Grove's mesh address and ingress proxy port: validated by Host (an IP literal inside
``FOREST_MESH_NETWORKS``, never a name), written by both heartbeat paths (the one-statement
``heartbeat_sql()`` and the full path) and by the statement's ORM twin alike, and shown on the Grove pages."""
from __future__ import annotations

import pytest
from django.utils import timezone

from apps.groves import rules, services
from apps.groves.models import Grove
from tests.factories import heartbeat_body
from tests.staff.conftest import observability_on  # noqa: F401

pytestmark = pytest.mark.django_db
V1 = "/api/forest/v1"


@pytest.fixture(autouse=True)
def _mesh_networks(settings):
    settings.FOREST_MESH_NETWORKS = ["10.8.0.0/24", "fd7a:115c:a1e0::/48"]


def _beat(**mesh):
    return {**heartbeat_body(), "mesh": mesh} if mesh else heartbeat_body()


def _mesh(grove) -> tuple:
    grove = Grove.objects.get(pk=grove.pk)
    return grove.mesh_address, grove.mesh_proxy_port


def test_the_mesh_address_is_claimed_once_then_kept_by_the_one_statement_path_and_cleared_when_dropped(
        fresh_grove, grove_client, django_assert_num_queries):
    grove, credential = fresh_grove()
    client = grove_client(credential)
    # A changed address is claimed under its lock (unique among live Groves), then the statement runs.
    assert client.post(f"{V1}/groves/{grove.id}/heartbeat", _beat(address="10.8.0.5", proxy_port=8480),
                       format="json").status_code == 200
    assert _mesh(grove) == ("10.8.0.5", 8480)
    with django_assert_num_queries(1):  # unchanged shape and mesh: heartbeat_sql() alone
        assert client.post(f"{V1}/groves/{grove.id}/heartbeat", _beat(address="10.8.0.5", proxy_port=8480),
                           format="json").status_code == 200
    client.post(f"{V1}/groves/{grove.id}/heartbeat", _beat(address="fd7a:115c:a1e0::0005", proxy_port=8480),
                format="json")
    assert _mesh(grove) == ("fd7a:115c:a1e0::5", 8480)
    client.post(f"{V1}/groves/{grove.id}/heartbeat", _beat(), format="json")
    assert _mesh(grove) == (None, None)


def test_the_full_path_records_it_with_a_changed_shape(enroll):
    grove, _ = enroll(name="mac")
    services.grove_heartbeat_record(grove=grove, body=_beat(address="10.8.0.9", proxy_port=9000))
    assert _mesh(grove) == ("10.8.0.9", 9000)


def test_the_statement_and_its_orm_twin_write_only_an_unchanged_mesh(fresh_grove):
    """A mesh that differs from the stored one is never written by the shared statement (nor its twin): the
    full path claims it under its lock, so uniqueness among live Groves holds on every path."""
    first, _ = fresh_grove(name="sql")
    second, _ = fresh_grove(name="orm")
    data = rules.heartbeat(_beat(address="10.8.0.7", proxy_port=8480), substrate="native",
                           mesh_networks=["10.8.0.0/24"])
    now = timezone.now()

    def rows(grove):
        return services.heartbeat_row(grove_id=grove.pk, data=data, now=now, credential=None)

    assert services.heartbeat_rows_run([rows(first)]) == {}
    assert services._heartbeat_row_orm(rows(second)) is None
    assert _mesh(first) == _mesh(second) == (None, None)
    Grove.objects.filter(pk__in=[first.pk, second.pk]).update(mesh_address="10.8.0.7", mesh_proxy_port=8480)
    assert services.heartbeat_rows_run([rows(first)]) == {str(first.pk): False}
    assert services._heartbeat_row_orm(rows(second)) is False


@pytest.mark.parametrize(("mesh", "code", "field"), [
    ({"address": "mac.mesh.example", "proxy_port": 8480}, "mesh_address_invalid", "mesh.address"),
    ({"address": "192.168.1.5", "proxy_port": 8480}, "mesh_address_outside_range", "mesh.address"),
    ({"address": "10.8.0.5", "proxy_port": 0}, "out_of_range", "mesh.proxy_port"),
    ({"address": "10.8.0.5"}, "field_required", "mesh.proxy_port"),
    ({"address": "10.8.0.5", "proxy_port": 8480, "listen": "0.0.0.0"}, "unknown_field", "mesh.listen"),
])
def test_a_bad_mesh_is_refused_and_nothing_changes(fresh_grove, grove_client, mesh, code, field):
    grove, credential = fresh_grove()
    response = grove_client(credential).post(f"{V1}/groves/{grove.id}/heartbeat",
                                             {**heartbeat_body(), "mesh": mesh}, format="json")
    assert response.status_code == 400
    assert (response.json()["code"], response.json()["field"]) == (code, field)
    assert _mesh(grove) == (None, None)


def test_only_a_native_grove_reports_a_mesh(fresh_grove, grove_client):
    grove, credential = fresh_grove(name="k8s", substrate="kubernetes", change_kinds=["k8s.job"])
    body = {**heartbeat_body(substrate="kubernetes"), "mesh": {"address": "10.8.0.5", "proxy_port": 8480}}
    response = grove_client(credential).post(f"{V1}/groves/{grove.id}/heartbeat", body, format="json")
    assert response.status_code == 400 and response.json()["code"] == "mesh_not_for_substrate"
    assert _mesh(grove) == (None, None)


def test_grove_api_and_pages_show_the_mesh(fresh_grove, grove_client, staff_client, client, staff_user,
                                           observability_on):  # noqa: F811
    grove, credential = fresh_grove(name="mac")
    grove_client(credential).post(f"{V1}/groves/{grove.id}/heartbeat", _beat(address="10.8.0.5", proxy_port=8480),
                                  format="json")
    listed = staff_client.get(f"{V1}/groves/{grove.id}").json()
    assert (listed["mesh_address"], listed["mesh_proxy_port"]) == ("10.8.0.5", 8480)
    client.force_login(staff_user)
    assert b"10.8.0.5:8480" in client.get("/staff/groves/").content
    detail = client.get("/staff/groves/mac/").content.decode()
    assert "<code>10.8.0.5</code>, ingress proxy port\n <code>8480</code>" in detail
