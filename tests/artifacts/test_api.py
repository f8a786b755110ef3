"""The CAS blob API: verified upload by staff/CI, download by staff or a Grove's own credential."""
from __future__ import annotations

import base64
import hashlib
from urllib.parse import urlencode

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from apps.artifacts.models import Artifact

pytestmark = pytest.mark.django_db
V1 = "/api/forest/v1"


def _digest(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def test_upload_verifies_digest_and_download_streams_bytes(staff_client, fresh_grove, grove_client):
    data = b"bundle bytes " * 1000
    digest = _digest(data)
    signature = base64.b64encode(Ed25519PrivateKey.generate().sign(digest.encode())).decode()
    query = urlencode({"digest": digest, "media_type": "application/gzip", "signature": signature,
                       "key_id": "release"})
    response = staff_client.post(f"{V1}/artifacts/blobs?{query}", data=data,
                                 content_type="application/octet-stream")
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["digest"], body["size"], body["storage_kind"], body["signing_key_id"]) == (
        digest, len(data), "cas", "release")
    _, credential = fresh_grove()
    download = grove_client(credential).get(f"{V1}/artifacts/{digest}/blob")
    assert download.status_code == 200
    assert b"".join(download.streaming_content) == data
    assert download["Docker-Content-Digest"] == digest
    assert staff_client.get(f"{V1}/artifacts/{digest}/blob").status_code == 200


def test_digest_mismatch_stores_nothing(staff_client, settings):
    data = b"real bytes"
    wrong = _digest(b"other bytes")
    response = staff_client.post(f"{V1}/artifacts/blobs?digest={wrong}", data=data,
                                 content_type="application/octet-stream")
    assert response.status_code == 400 and response.json()["code"] == "digest_mismatch"
    assert not Artifact.objects.exists()
    assert not any(p.is_file() and not p.name.startswith(".") for p in settings.FOREST_CAS_ROOT.rglob("*"))


def test_oversized_blob_and_bad_inputs_are_refused(staff_client, settings):
    settings.FOREST_MAX_BLOB_BYTES = 100
    response = staff_client.post(f"{V1}/artifacts/blobs", data=b"x" * 101, content_type="application/octet-stream")
    assert response.status_code == 413 and response.json()["code"] == "blob_too_large"
    response = staff_client.post(f"{V1}/artifacts/blobs?digest=md5:abc", data=b"x",
                                 content_type="application/octet-stream")
    assert response.status_code == 400 and response.json()["code"] == "invalid_digest"
    response = staff_client.post(f"{V1}/artifacts/blobs?signature=notbase64!&key_id=k", data=b"x",
                                 content_type="application/octet-stream")
    assert response.status_code == 400 and response.json()["code"] == "invalid_signature"
    assert not Artifact.objects.exists()


def test_download_needs_credentials_and_an_existing_blob(anon_client, staff_client):
    missing = _digest(b"never uploaded")
    assert anon_client.get(f"{V1}/artifacts/{missing}/blob").status_code == 401
    response = staff_client.get(f"{V1}/artifacts/{missing}/blob")
    assert response.status_code == 404 and response.json()["code"] == "artifact_not_found"
    assert staff_client.get(f"{V1}/artifacts/not-a-digest/blob").json()["code"] == "invalid_digest"


def test_upload_needs_staff_token(anon_client, fresh_grove, grove_client):
    assert anon_client.post(f"{V1}/artifacts/blobs", data=b"x",
                            content_type="application/octet-stream").status_code == 401
    _, credential = fresh_grove()
    assert grove_client(credential).post(f"{V1}/artifacts/blobs", data=b"x",
                                         content_type="application/octet-stream").status_code == 401
