"""API tokens: hashed at rest, named, expiring, revocable; the commands that print a token once; and the
``Authorization: Token <key>`` header clients already send."""
from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from apps.accounts import services
from apps.accounts.models import ApiToken, AuditEvent
from apps.accounts.roles import VIEWER
from tests.factories import UserFactory, grant
from tests.fingerprint import changed_tables, table_fingerprint

pytestmark = pytest.mark.django_db
GROVES = "/api/forest/v1/groves"


@pytest.fixture
def viewer(db):
    return grant(UserFactory(username="ci-bot", is_staff=False), VIEWER)


def _client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def test_a_token_is_stored_only_as_a_hash(viewer):
    token, presented = services.api_token_create(user=viewer, name="ci-main")
    secret = presented.split(".", 1)[1]
    assert presented.startswith(f"fat_{token.key_id}.")
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM accounts_apitoken")
        stored = repr(cursor.fetchall())
    assert secret not in stored and token.secret_hash in stored
    assert _client(presented).get(GROVES).status_code == 200


@pytest.mark.parametrize(("spoil", "code"), [
    (lambda t: ApiToken.objects.filter(pk=t.pk).update(expires_at=timezone.now() - timedelta(seconds=1)),
     "token_expired"),
    (lambda t: services.api_token_revoke(token=t, reason="laptop lost"), "token_revoked"),
    (lambda t: type(t.user).objects.filter(pk=t.user_id).update(is_active=False), "user_inactive"),
])
def test_expired_revoked_and_inactive_tokens_are_refused(viewer, spoil, code):
    token, presented = services.api_token_create(user=viewer, name="ci-main")
    spoil(token)
    before = table_fingerprint()
    response = _client(presented).get(GROVES)
    assert response.status_code == 401 and response.json()["code"] == code
    assert changed_tables(before, table_fingerprint()) == []


@pytest.mark.parametrize("presented", ["0123456789abcdef0123456789abcdef01234567",  # an old DRF key
                                       "fat_ffff.nope", "fat_\x00ab.cd", "fgc_0011.abc", "fat_zz.abc"])
def test_unknown_and_odd_tokens_are_401_not_500(viewer, presented):
    response = APIClient().get(GROVES, HTTP_AUTHORIZATION=f"Token {presented}")
    assert response.status_code == 401 and response.json()["code"] == "authentication_failed"


def test_a_malformed_header_is_refused(viewer):
    response = APIClient().get(GROVES, HTTP_AUTHORIZATION="Token a b")
    assert response.status_code == 401 and response.json()["code"] == "authentication_failed"


def test_names_are_unique_among_live_tokens_and_expiry_is_bounded(viewer):
    token, _ = services.api_token_create(user=viewer, name="ci-main")
    with pytest.raises(services.Conflict):
        services.api_token_create(user=viewer, name="ci-main")
    services.api_token_revoke(token=token, reason="rotated")
    services.api_token_create(user=viewer, name="ci-main")  # the name is free again
    with pytest.raises(services.ValidationFailed):
        services.api_token_create(user=viewer, name="forever", expires_in_days=10_000)


def test_api_token_command_prints_the_token_once_and_lists_and_revokes(viewer):
    out, err = StringIO(), StringIO()
    call_command("api_token", "create", "ci-bot", "--name", "ci-main", "--expires-in", "7", stdout=out, stderr=err)
    presented = out.getvalue().strip()
    token = ApiToken.objects.get()
    assert presented.startswith(f"fat_{token.key_id}.") and "shown only now" in err.getvalue()
    assert timedelta(days=6) < token.expires_at - timezone.now() <= timedelta(days=7)
    assert _client(presented).get(GROVES).status_code == 200
    listing = StringIO()
    call_command("api_token", "list", stdout=listing)
    assert token.key_id in listing.getvalue() and presented.split(".")[1] not in listing.getvalue()
    call_command("api_token", "revoke", token.key_id, "--reason", "rotation", stdout=StringIO())
    assert _client(presented).get(GROVES).json()["code"] == "token_revoked"
    actions = list(AuditEvent.objects.order_by("id").values_list("action", "via"))
    assert actions[-2:] == [("api_token.create", "command"), ("api_token.revoke", "command")]


def test_drf_create_token_keeps_working(viewer):
    out = StringIO()
    call_command("drf_create_token", "ci-bot", stdout=out)
    first = out.getvalue().split()[2]
    assert out.getvalue().startswith("Generated token fat_") and out.getvalue().strip().endswith("for user ci-bot")
    assert _client(first).get(GROVES).status_code == 200
    with pytest.raises(CommandError, match="token_name_taken"):
        call_command("drf_create_token", "ci-bot", stdout=StringIO())
    again = StringIO()
    call_command("drf_create_token", "-r", "ci-bot", stdout=again)
    assert _client(first).get(GROVES).json()["code"] == "token_revoked"
    assert _client(again.getvalue().split()[2]).get(GROVES).status_code == 200
    with pytest.raises(CommandError, match="does not exist"):
        call_command("drf_create_token", "nobody")


def test_admin_makes_a_token_and_shows_it_once(client, django_user_model, viewer):
    root = django_user_model.objects.create_superuser("root", "root@example.com", "pw-123456789")
    client.force_login(root)
    response = client.post("/admin/accounts/apitoken/add/", {"user": viewer.pk, "name": "ci-admin",
                                                             "expires_in_days": "30"}, follow=True)
    assert response.status_code == 200
    token = ApiToken.objects.get(name="ci-admin")
    shown = [str(m) for m in response.context["messages"] if "fat_" in str(m)]
    assert len(shown) == 1 and f"fat_{token.key_id}." in shown[0]
    presented = shown[0].split(": ", 1)[1].split(" ")[0]
    assert _client(presented).get(GROVES).status_code == 200
    page = client.get(f"/admin/accounts/apitoken/{token.pk}/change/")
    assert page.status_code == 200 and presented.split(".")[1].encode() not in page.content
    client.post("/admin/accounts/apitoken/", {"action": "revoke", "_selected_action": [token.pk]})
    assert _client(presented).get(GROVES).json()["code"] == "token_revoked"
    assert AuditEvent.objects.filter(action="api_token.revoke", via="admin", actor=root).exists()
