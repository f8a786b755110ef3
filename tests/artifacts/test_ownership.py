"""Issue 33, over real HTTP against a live Host (PostgreSQL): content addressing never moves ownership,
downloads are downloads, media types and key ids are validated on upload, and a workload reads only its
own team's bundle. Two teams (``red``, ``blue``), each with a viewer, a submitter and a workload operator;
every refused call is checked to have changed nothing in the whole database (``tests.fingerprint``) and
nothing in the blob store."""
from __future__ import annotations

import base64
import urllib.parse
from datetime import datetime

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from apps.accounts import roles
from apps.artifacts.models import Artifact
from tests.artifacts.conftest import sha
from tests.factories import UserFactory, api_token_for, grant
from tests.fingerprint import changed_tables, table_fingerprint

pytestmark = pytest.mark.django_db(transaction=True)
V1 = "/api/forest/v1"
ROLES = {"viewer": roles.VIEWER, "submitter": roles.SUBMITTER, "operator": roles.WORKLOAD_OPERATOR}


@pytest.fixture
def http(live_server, db):
    """``http[team][role]``: an httpx client against the live Host with that user's API token."""
    clients: dict[str, dict[str, httpx.Client]] = {}
    for team in ("red", "blue"):
        clients[team] = {}
        for name, role in ROLES.items():
            user = grant(UserFactory(username=f"{team}-{name}"), role, teams=(team,))
            clients[team][name] = httpx.Client(base_url=f"{live_server.url}{V1}", timeout=30,
                                               headers={"Authorization": f"Token {api_token_for(user)}"})
    yield clients
    for by_role in clients.values():
        for client in by_role.values():
            client.close()


def _signed(data: bytes) -> tuple[str, str]:
    digest = sha(data)
    return digest, base64.b64encode(Ed25519PrivateKey.generate().sign(digest.encode())).decode()


def _upload(client: httpx.Client, data: bytes, **params) -> httpx.Response:
    query = urllib.parse.urlencode({"digest": sha(data), **params})
    return client.post(f"/artifacts/blobs?{query}", content=data,
                       headers={"Content-Type": "application/octet-stream"})


def _files(settings) -> set:
    root = settings.FOREST_CAS_ROOT
    return {(p, p.stat().st_size) for p in root.rglob("*") if p.is_file()} if root.exists() else set()


def _row(pk: int) -> dict:
    return Artifact.objects.filter(pk=pk).values("team", "uploaded_by", "signature", "signing_key_id",
                                                 "media_type", "created_at", "reference").get()


# --- (1) content addressing never moves ownership --------------------------------------------------------

def test_the_same_bytes_from_another_team_make_its_own_row_and_never_touch_the_first(http):
    data = b"red's signed bundle bytes"
    digest, signature = _signed(data)
    made = _upload(http["red"]["operator"], data, media_type="application/gzip", signature=signature,
                   key_id="release-2026", team="red")
    assert made.status_code == 201, made.text
    red_id = made.json()["id"]
    before = _row(red_id)

    again = _upload(http["blue"]["submitter"], data)  # the same bytes, unsigned, another team
    assert again.status_code == 201, again.text
    answer = again.json()
    assert answer["id"] != red_id and answer["team"] == "blue"
    # Nothing of red's row reaches blue: not its id, its time, its signature, key id or media type.
    text = again.text
    assert str(red_id) not in {str(v) for v in answer.values()}
    assert signature not in text and "release-2026" not in text and "application/gzip" not in text
    assert datetime.fromisoformat(answer["created_at"]) != before["created_at"]
    assert _row(red_id) == before

    # Red still reads its own artifact; blue cannot read red's row by id; each lists only its own row.
    assert http["red"]["viewer"].get(f"/artifacts/{red_id}").status_code == 200
    refused = http["blue"]["viewer"].get(f"/artifacts/{red_id}")
    assert refused.status_code == 404 and refused.json()["code"] == "not_found"
    blue_ids = {row["id"] for row in http["blue"]["viewer"].get("/artifacts", params={"page_size": 100})
                .json()["results"]}
    assert red_id not in blue_ids and answer["id"] in blue_ids
    assert Artifact.objects.filter(digest=digest).count() == 2


def test_signature_key_id_and_media_type_are_set_once(http, settings):
    data = b"bundle with a signature"
    _, signature = _signed(data)
    first = _upload(http["red"]["operator"], data, media_type="application/gzip", signature=signature,
                    key_id="release")
    red_id = first.json()["id"]
    before_row, before_db, before_files = _row(red_id), table_fingerprint(), _files(settings)
    _, other_signature = _signed(data)
    for params, field in (({"signature": other_signature, "key_id": "release"}, "signature"),
                          ({"signature": signature, "key_id": "other-key"}, "key_id"),
                          ({"media_type": "text/html"}, "media_type")):
        refused = _upload(http["red"]["operator"], data, **params)
        assert (refused.status_code, refused.json()["code"], refused.json()["field"]) == (
            409, "artifact_immutable", field), params
    assert changed_tables(before_db, table_fingerprint()) == [] and _files(settings) == before_files
    # The same bytes again without any of them: the team's own row, as it was.
    repeat = _upload(http["red"]["operator"], data)
    assert repeat.status_code == 201 and repeat.json()["id"] == red_id
    assert _row(red_id) == before_row


# --- (2) downloads are downloads; media types are validated -----------------------------------------------

HOSTILE = {
    "text/html": b"<html><body><script>document.title='pwned'</script></body></html>",
    "image/svg+xml": b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>',
    "application/xhtml+xml": b'<html xmlns="http://www.w3.org/1999/xhtml"><script>alert(1)</script></html>',
    "text/xml": b"<?xml version='1.0'?><x/>",
    "application/vnd.evil+xml": b"<x/>",
    "text/javascript": b"alert(1)",
}


@pytest.mark.parametrize("media_type", sorted(HOSTILE))
def test_an_active_type_is_served_as_an_attachment_of_inert_bytes(http, media_type):
    data = HOSTILE[media_type]
    assert _upload(http["red"]["submitter"], data, media_type=media_type).status_code == 201
    response = http["red"]["viewer"].get(f"/artifacts/{sha(data)}/blob")
    assert response.status_code == 200 and response.content == data
    assert response.headers["content-type"] == "application/octet-stream"
    assert response.headers["content-disposition"].startswith("attachment;")
    assert response.headers["content-security-policy"] == "sandbox; default-src 'none'"
    assert response.headers["x-content-type-options"] == "nosniff"


def test_an_inert_type_keeps_its_type_with_the_same_download_headers(http):
    data = b"col\n1\n"
    _upload(http["red"]["submitter"], data, media_type="Text/CSV; charset=utf-8")
    response = http["red"]["viewer"].get(f"/artifacts/{sha(data)}/blob")
    assert response.headers["content-type"] == "text/csv; charset=utf-8"
    assert response.headers["content-disposition"] == f'attachment; filename="{sha(data).replace(":", "-")}"'
    assert response.headers["content-security-policy"] == "sandbox; default-src 'none'"


@pytest.mark.parametrize(("params", "code", "field"), [
    ({"media_type": "application/" + "x" * 600}, "invalid_media_type", "media_type"),
    ({"media_type": "text/plain\r\nX-Evil: 1"}, "invalid_media_type", "media_type"),
    ({"media_type": "text/plain\x0b"}, "invalid_media_type", "media_type"),
    ({"media_type": "no-slash"}, "invalid_media_type", "media_type"),
    ({"media_type": "text/html; x=<script>"}, "invalid_media_type", "media_type"),
    ({"key_id": "k" * 600, "signature": base64.b64encode(b"s" * 64).decode()}, "invalid_key_id", "key_id"),
    ({"signature": "A" * 5000, "key_id": "k"}, "invalid_signature", "signature"),
])
def test_a_bad_declaration_is_a_coded_400_that_stores_nothing(http, settings, params, code, field):
    before_db, before_files = table_fingerprint(), _files(settings)
    response = _upload(http["red"]["submitter"], b"bytes that must not be stored", **params)
    assert (response.status_code, response.json()["code"], response.json()["field"]) == (400, code, field)
    assert changed_tables(before_db, table_fingerprint()) == [] and _files(settings) == before_files


def test_a_row_stored_before_validation_still_downloads_safely(http):
    """A media type with CR LF written before types were checked (the issue's reproduction): every later
    download used to be a 500; it is served as inert bytes."""
    data = b"old row"
    made = _upload(http["red"]["submitter"], data).json()
    Artifact.objects.filter(pk=made["id"]).update(media_type="text/html\r\nSet-Cookie: x=1")
    response = http["red"]["viewer"].get(f"/artifacts/{sha(data)}/blob")
    assert response.status_code == 200 and response.headers["content-type"] == "application/octet-stream"
    assert "set-cookie" not in response.headers


# --- (3) a workload reads only its own team's bundle -----------------------------------------------------

def test_a_workload_cannot_name_another_teams_bundle(http, settings, fresh_grove):
    settings.FOREST_NATIVE_WORKLOAD_DISPATCH = True
    fresh_grove(name="mac", roles=("runtime",), platforms=("darwin/arm64",),
                change_kinds=["native.job", "native.workload"])
    data = b"red's bundle"
    _, signature = _signed(data)
    _upload(http["red"]["operator"], data, signature=signature, key_id="release")
    body = {"slug": "stolen", "bundle_digest": sha(data), "command": ["./server"]}
    admin_token = api_token_for(grant(UserFactory(username="admin"), roles.STAFF_ADMIN))
    before = table_fingerprint()
    refused = http["blue"]["operator"].post("/workloads", json=body)
    assert (refused.status_code, refused.json()["code"]) == (400, "artifact_not_found"), refused.text
    # A staff admin (every team's work) applying for blue is held to blue's bundles too.
    as_admin = http["blue"]["operator"].post("/workloads", json={**body, "team": "blue"},
                                             headers={"Authorization": f"Token {admin_token}"})
    assert (as_admin.status_code, as_admin.json()["code"]) == (400, "artifact_not_found"), as_admin.text
    assert changed_tables(before, table_fingerprint()) == []
    # Blue uploading the same bytes unsigned gives it an unsigned row of its own, still not red's signature.
    _upload(http["blue"]["operator"], data)
    unsigned = http["blue"]["operator"].post("/workloads", json=body)
    assert (unsigned.status_code, unsigned.json()["code"]) == (400, "bundle_unsigned")
    # Red's own apply works with red's signed row.
    own = http["red"]["operator"].post("/workloads", json={**body, "slug": "red-web"})
    assert own.status_code == 200, own.text
