"""Issue 33: the Django admin follows the role table. Over real HTTP against a live Host with a signed-in
session: a viewer (``groves.view_grove``) reads a Grove's page but sees no enrollment token, no credential
and none of their metadata (key ids, notes, dates) anywhere in the admin; artifacts and ingress routes of
another team stay out of its lists. A staff admin still sees the credentials."""
from __future__ import annotations

import re

import httpx
import pytest
from django.test import Client

from apps.accounts import roles
from apps.artifacts.services import artifact_blob_create
from apps.groves.models import GroveCredential
from apps.groves.services import enrollment_token_create
from tests.factories import UserFactory, grant

pytestmark = pytest.mark.django_db(transaction=True)


def _session(live_server, user) -> httpx.Client:
    client = Client()
    client.force_login(user)
    return httpx.Client(base_url=live_server.url, timeout=30,
                        cookies={"sessionid": client.cookies["sessionid"].value}, follow_redirects=False)


def _links(html: str) -> set[str]:
    return set(re.findall(r'href="(/admin/[^"#?]+)"', html))


def test_a_viewer_sees_no_enrollment_token_or_credential_in_admin(live_server, fresh_grove):
    grove, _ = fresh_grove(name="mac")
    token, _ = enrollment_token_create(roles=["compute"], substrate="native", note="spare box in rack 7")
    key_id = GroveCredential.objects.get(grove=grove).key_id
    artifact_blob_create(chunks=[b"blue's"], team="blue", media_type="application/gzip")
    viewer = grant(UserFactory(username="red-viewer"), roles.VIEWER, teams=("red",))
    admin = grant(UserFactory(username="red-admin"), roles.STAFF_ADMIN, teams=("red",))

    with _session(live_server, viewer) as http:
        index = http.get("/admin/")
        assert index.status_code == 200
        pages = {"/admin/", f"/admin/groves/grove/{grove.pk}/change/", "/admin/groves/grove/",
                 "/admin/artifacts/artifact/", "/admin/ingress/ingressroute/"} | _links(index.text)
        for page in sorted(pages):
            response = http.get(page)
            if response.status_code != 200:
                assert response.status_code in (302, 403, 404), page
                continue
            text = response.text
            assert token.key_id not in text and key_id not in text, page
            assert "spare box in rack 7" not in text and "Grove credentials" not in text, page
            assert "blue&#x27;s" not in text and "application/gzip" not in text, page
        for forbidden in ("/admin/groves/enrollmenttoken/", f"/admin/groves/enrollmenttoken/{token.pk}/change/",
                          "/admin/groves/grovecredential/", "/admin/accounts/apitoken/"):
            assert http.get(forbidden).status_code == 403, forbidden

    with _session(live_server, admin) as http:
        page = http.get(f"/admin/groves/grove/{grove.pk}/change/").text
        assert key_id in page
        assert token.key_id in http.get("/admin/groves/enrollmenttoken/").text
