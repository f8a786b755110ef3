"""Shared fixtures: users and tokens for the staff API, Groves with credentials for the wire API."""
from __future__ import annotations

import pytest
from django.db import connections
from rest_framework.test import APIClient

from apps.accounts.roles import STAFF_ADMIN
from apps.groves import services as grove_services
from tests.factories import UserFactory, api_token_for, grant, heartbeat_body

pytest_plugins = ["tests.estate"]


@pytest.fixture(scope="session", autouse=True)
def _pools_closed_before_teardown(django_db_setup, django_db_blocker):
    """Host pools its PostgreSQL connections (apps/core/db.py): give them back before the test database
    is dropped, or the drop finds the pool's idle connection still in it. Connections opened by threads
    the tests started (in-process workers, live servers) are not this thread's to close: they are ended
    server-side, so the drop never fails on "being accessed by other users"."""
    yield
    with django_db_blocker.unblock():
        default = connections["default"]
        test_name = (default.settings_dict.get("TEST") or {}).get("NAME") or "test_"
        # Only when this session made a test database (a run of pure tests never connects).
        if default.vendor == "postgresql" and str(default.settings_dict["NAME"]).startswith(test_name):
            with default.cursor() as cursor:
                cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                               "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        for conn in connections.all():
            conn.close()
            if getattr(conn, "pool", None) is not None:
                conn.close_pool()


@pytest.fixture
def staff_user(db):
    """A staff admin: every role permission, every team."""
    return grant(UserFactory(username="staff", is_staff=True), STAFF_ADMIN)


@pytest.fixture
def staff_client(staff_user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_for(staff_user, 'staff-client')}")
    return client


@pytest.fixture
def anon_client() -> APIClient:
    return APIClient()


@pytest.fixture
def enroll(db):
    """Enroll a Grove through the real service; returns (grove, credential)."""

    def _enroll(name: str = "box", substrate: str = "native", roles=("compute",),
                platforms=("linux/amd64",)):
        _, token = grove_services.enrollment_token_create(roles=list(roles), substrate=substrate)
        return grove_services.grove_enroll(body={"token": token, "name": name, "substrate": substrate,
                                                 "platforms": list(platforms), "version": "test"})

    return _enroll


@pytest.fixture
def grove_client():
    def _client(credential: str) -> APIClient:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {credential}")
        return client

    return _client


@pytest.fixture
def fresh_grove(enroll):
    """A native compute Grove that has heartbeated once (so it is live) and polled for work (so it is ready,
    as a running agent is), with its credential. ``polled=False``: live but not ready."""

    def _make(name="box", substrate="native", roles=("compute",), platforms=("linux/amd64",), gpus=0,
              change_kinds=None, polled=True):
        grove, credential = enroll(name=name, substrate=substrate, roles=roles, platforms=platforms)
        grove = grove_services.grove_heartbeat_record(
            grove=grove, body=heartbeat_body(substrate=substrate, gpus=gpus, change_kinds=change_kinds))
        if polled:
            grove_services.grove_poll_record(grove=grove)
        return grove, credential

    return _make


@pytest.fixture(autouse=True)
def _cas_root(settings, tmp_path):
    """Every test gets its own content-addressed store directory."""
    settings.FOREST_CAS_ROOT = tmp_path / "cas"
