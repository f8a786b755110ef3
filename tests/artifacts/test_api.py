"""The CAS API on the filesystem backend: verified upload by a user holding ``artifacts.add_artifact``,
download by a permitted user or a Grove whose work references the blob, list/detail with filters, and
every bad input refused with a code and nothing half-stored."""
from __future__ import annotations

import base64
import socket
from urllib.parse import urlencode

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from apps.artifacts import services
from apps.artifacts.models import Artifact
from tests.artifacts.conftest import V1, sha

pytestmark = pytest.mark.django_db


def _upload(client, data: bytes, **params):
    query = f"?{urlencode(params)}" if params else ""
    return client.post(f"{V1}/artifacts/blobs{query}", data=data, content_type="application/octet-stream")


def _stored_files(settings) -> list:
    root = settings.FOREST_CAS_ROOT
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def test_upload_verifies_digest_and_records_the_uploader(uploader):
    data = b"bundle bytes " * 1000
    digest = sha(data)
    signature = base64.b64encode(Ed25519PrivateKey.generate().sign(digest.encode())).decode()
    response = _upload(uploader, data, digest=digest, media_type="application/gzip", signature=signature,
                       key_id="release", platform="darwin/arm64")
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["digest"], body["size"], body["storage_kind"], body["signing_key_id"]) == (
        digest, len(data), "cas", "release")
    assert (body["platform"], body["platform_status"], body["platform_source"]) == ("darwin/arm64", "known", "declared")
    assert body["uploaded_by"].startswith("u-")
    download = uploader.get(f"{V1}/artifacts/{digest}/blob")
    assert download.status_code == 200
    assert b"".join(download.streaming_content) == data
    assert download["Docker-Content-Digest"] == digest and download["Content-Length"] == str(len(data))


def test_list_and_detail_filter_by_kind_platform_and_run(uploader):
    blob = _upload(uploader, b"a", platform="linux/arm64").json()
    Artifact.objects.create(digest=sha(b"img"), storage_kind="oci_registry", reference="r/app@" + sha(b"img"),
                            platform="linux/amd64", platform_status="known", producing_run_id="run-1",
                            producing_node="build")
    listing = uploader.get(f"{V1}/artifacts").json()
    assert listing["count"] == 2
    assert [a["storage_kind"] for a in uploader.get(f"{V1}/artifacts?kind=cas").json()["results"]] == ["cas"]
    assert [a["digest"] for a in uploader.get(f"{V1}/artifacts?platform=linux/arm64/v8").json()["results"]] == [
        blob["digest"]]
    assert uploader.get(f"{V1}/artifacts?run=run-1").json()["results"][0]["producing_node"] == "build"
    assert uploader.get(f"{V1}/artifacts?storage_kind=nonsense").json()["code"] == "invalid_choice"
    detail = uploader.get(f"{V1}/artifacts/{blob['id']}").json()
    assert detail["digest"] == blob["digest"] and detail["platform_checks"] == []
    assert uploader.get(f"{V1}/artifacts/999999").json()["code"] == "not_found"


def test_digest_mismatch_stores_nothing(uploader, settings):
    response = _upload(uploader, b"real bytes", digest=sha(b"other bytes"))
    assert response.status_code == 400 and response.json()["code"] == "digest_mismatch"
    assert not Artifact.objects.exists() and _stored_files(settings) == []


def test_oversized_and_malformed_uploads_are_refused(uploader, settings):
    settings.FOREST_MAX_BLOB_BYTES = 100
    response = _upload(uploader, b"x" * 101)
    assert response.status_code == 413 and response.json()["code"] == "blob_too_large"
    for params, code in (({"digest": "md5:abc"}, "invalid_digest"),
                         ({"signature": "notbase64!", "key_id": "k"}, "invalid_signature"),
                         ({"signature": base64.b64encode(b"x" * 64).decode()}, "field_required"),
                         ({"platform": "linux/sparc"}, "invalid_platform")):
        response = _upload(uploader, b"x", **params)
        assert response.status_code == 400 and response.json()["code"] == code, params
    assert not Artifact.objects.exists() and _stored_files(settings) == []


def test_oversize_is_refused_while_streaming_when_no_length_is_announced(settings):
    settings.FOREST_MAX_BLOB_BYTES = 10
    with pytest.raises(services.ForestError) as exc:
        services.artifact_blob_create(chunks=iter([b"12345", b"67890", b"1"]))
    assert exc.value.code == "blob_too_large"
    assert _stored_files(settings) == []


@pytest.mark.django_db(transaction=True)
def test_truncated_upload_over_a_real_socket_stores_nothing(live_server, user_client, settings):
    """A client that announces 1000 bytes, sends 400 and half-closes: ``upload_truncated``."""
    client = user_client("add_artifact")
    token = client._credentials["HTTP_AUTHORIZATION"]
    host, port = live_server.thread.host, live_server.thread.port
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(f"POST {V1}/artifacts/blobs HTTP/1.1\r\nHost: {host}\r\nAuthorization: {token}\r\n"
                     f"Content-Type: application/octet-stream\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n"
                     .encode() + b"y" * 400)
        sock.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 400"), reply[:200]
    assert b'"upload_truncated"' in reply
    assert not Artifact.objects.exists() and _stored_files(settings) == []


def test_download_of_a_missing_blob_and_bad_digests(uploader, anon_client):
    missing = sha(b"never uploaded")
    assert anon_client.get(f"{V1}/artifacts/{missing}/blob").status_code == 401
    response = uploader.get(f"{V1}/artifacts/{missing}/blob")
    assert response.status_code == 404 and response.json()["code"] == "artifact_not_found"
    assert uploader.get(f"{V1}/artifacts/not-a-digest/blob").json()["code"] == "invalid_digest"


def test_gc_endpoint_reports_for_a_permitted_user(uploader):
    body = uploader.post(f"{V1}/artifacts/gc", {"dry_run": True}, format="json").json()
    assert body == {"backend": "filesystem", "examined": 0, "removed": 0, "kept": 0, "staging_removed": 0,
                    "dry_run": True, "skipped": ""}
