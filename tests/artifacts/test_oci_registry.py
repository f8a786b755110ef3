"""OCI images against a real registry (Debian's docker-registry on a free loopback port): multi-platform
indexes (amd64, arm64/v8, arm/v7) and single-platform images are pushed byte by byte over plain HTTP,
then imported for Groves of different platform orders through the API."""
from __future__ import annotations

import json
import socket
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from apps.artifacts import services
from apps.artifacts.models import Artifact, ArtifactPlatformCheck
from tests.artifacts.conftest import V1

pytestmark = pytest.mark.django_db


@pytest.fixture
def multi(registry):
    """An OCI index of three real images plus a buildx-style attestation entry."""
    repo = f"forest/multi-{uuid.uuid4().hex[:8]}"
    amd64 = registry.push_image(repo, arch="amd64")
    arm64 = registry.push_image(repo, arch="arm64", variant="v8")
    armv7 = registry.push_image(repo, arch="arm", variant="v7")
    attestation = {**registry.push_image(repo, os_name="linux", arch="amd64"),
                   "platform": {"os": "unknown", "architecture": "unknown"}}
    children = [{k: c[k] for k in ("mediaType", "digest", "size", "platform")}
                for c in (amd64, arm64, armv7, attestation)]
    index = registry.push_index(repo, "1.0", children)
    return {"repo": repo, "ref": registry.ref(repo, "1.0"), "index": index, "amd64": amd64, "arm64": arm64,
            "armv7": armv7}


def _import(client, reference, grove):
    return client.post(f"{V1}/artifacts/imports", {"reference": reference, "grove": grove}, format="json")


@pytest.mark.parametrize(("platforms", "chosen", "platform"), [
    (["linux/arm64", "linux/amd64"], "arm64", "linux/arm64"),
    (["linux/amd64", "linux/arm64"], "amd64", "linux/amd64"),
    (["darwin/arm64", "linux/arm/v7", "linux/amd64"], "armv7", "linux/arm/v7"),
    (["linux/arm64/v8"], "arm64", "linux/arm64"),
])
def test_index_resolves_in_the_groves_reported_order(multi, uploader, enroll, platforms, chosen, platform):
    grove, _ = enroll(name=f"g-{uuid.uuid4().hex[:6]}", substrate="kubernetes", roles=("runtime",),
                      platforms=platforms)
    response = _import(uploader, multi["ref"], grove.slug)
    assert response.status_code == 201, response.json()
    body = response.json()
    child = multi[chosen]["digest"]
    assert body["index_digest"] == multi["index"]["digest"]
    assert body["artifact"]["digest"] == child
    assert body["artifact"]["reference"] == f"{multi['ref'].rsplit(':', 1)[0]}@{child}"
    assert (body["artifact"]["storage_kind"], body["artifact"]["platform"], body["artifact"]["platform_status"]) == (
        "oci_registry", platform, "known")
    assert body["matched"].startswith("grove:") and body["check"]["verdict"] == "ok"
    assert body["offered"] == ["linux/amd64", "linux/arm64/v8", "linux/arm/v7", "unknown/unknown"]
    assert Artifact.objects.get(digest=child).platform_source.startswith("index:grove:")


def test_no_matching_platform_lists_both_sides_and_records_nothing(multi, uploader, enroll):
    grove, _ = enroll(name="s390", substrate="kubernetes", roles=("runtime",), platforms=["linux/s390x"])
    response = _import(uploader, multi["ref"], grove.slug)
    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "no_matching_platform"
    assert body["offered"] == ["linux/amd64", "linux/arm64/v8", "linux/arm/v7", "unknown/unknown"]
    assert body["grove_platforms"] == ["linux/s390x"]
    assert not Artifact.objects.exists()


def test_a_grove_with_no_usable_platform_gets_the_documented_fallback(multi, uploader, enroll, settings):
    grove, _ = enroll(name="blank", substrate="kubernetes", roles=("runtime",), platforms=["linux/amd64"])
    grove.platforms = []
    grove.save(update_fields=["platforms"])
    settings.FOREST_OCI_FALLBACK_PLATFORMS = ["linux/arm64"]
    body = _import(uploader, multi["ref"], str(grove.pk)).json()
    assert body["matched"] == "fallback:linux/arm64" and body["artifact"]["digest"] == multi["arm64"]["digest"]
    assert body["check"]["verdict"] == "ok"  # the Grove names no platform: nothing to refuse


def test_docker_manifest_list_and_single_images_read_their_config(registry, uploader, enroll):
    repo = f"forest/docker-{uuid.uuid4().hex[:8]}"
    arm = registry.push_image(repo, arch="arm64", docker=True)
    amd = registry.push_image(repo, arch="amd64", docker=True)
    children = [{k: c[k] for k in ("mediaType", "digest", "size", "platform")} for c in (amd, arm)]
    registry.push_index(repo, "list", children, docker=True)
    grove, _ = enroll(name="pi", substrate="kubernetes", roles=("runtime",), platforms=["linux/arm64"])
    body = _import(uploader, registry.ref(repo, "list"), grove.slug).json()
    assert body["artifact"]["digest"] == arm["digest"]
    assert body["artifact"]["media_type"] == "application/vnd.docker.distribution.manifest.v2+json"
    # a single-platform image by tag and by digest: the platform comes from its config blob
    single = registry.push_image(repo, arch="arm", variant="v7", tag="v7")
    armv7, _ = enroll(name="armv7", substrate="kubernetes", roles=("runtime",), platforms=["linux/arm/v7"])
    for reference in (registry.ref(repo, "v7"), registry.ref(repo, single["digest"])):
        body = _import(uploader, reference, armv7.slug).json()
        assert (body["artifact"]["digest"], body["artifact"]["platform"], body["index_digest"]) == (
            single["digest"], "linux/arm/v7", "")
        assert body["artifact"]["platform_source"] == "config"


def test_unreadable_config_is_recorded_unknown_not_guessed(registry, uploader, enroll):
    repo = f"forest/odd-{uuid.uuid4().hex[:8]}"
    image = registry.push_image(repo, tag="odd", config=b"this is not a json config")
    grove, _ = enroll(name="any", substrate="kubernetes", roles=("runtime",), platforms=["linux/amd64"])
    body = _import(uploader, registry.ref(repo, "odd"), grove.slug).json()
    assert body["artifact"]["digest"] == image["digest"]
    assert (body["artifact"]["platform"], body["artifact"]["platform_status"]) == ("", "unknown")
    assert body["artifact"]["platform_source"] == "config_unreadable:no_platform"
    assert body["check"]["verdict"] == "platform_unknown"


def test_a_single_image_for_the_wrong_platform_is_refused_only_with_the_flag(registry, uploader, enroll, flag_on):
    repo = f"forest/amd-{uuid.uuid4().hex[:8]}"
    registry.push_image(repo, arch="amd64", tag="x")
    grove, _ = enroll(name="mac", substrate="kubernetes", roles=("runtime",), platforms=["linux/arm64"])
    off = _import(uploader, registry.ref(repo, "x"), grove.slug)
    assert off.status_code == 201 and off.json()["check"]["verdict"] == "would_refuse"
    Artifact.objects.all().delete()
    flag_on("host.deploy.forest_compatibility")
    on = _import(uploader, registry.ref(repo, "x"), grove.slug)
    assert on.status_code == 409 and on.json()["code"] == "artifact_platform_mismatch"
    assert not Artifact.objects.exists() and not ArtifactPlatformCheck.objects.exists()


def test_registry_failures_are_coded_and_record_nothing(registry, uploader, enroll, settings):
    grove, _ = enroll(name="g", substrate="kubernetes", roles=("runtime",), platforms=["linux/amd64"])
    missing = _import(uploader, registry.ref("forest/never-pushed", "1"), grove.slug)
    assert missing.status_code == 404 and missing.json()["code"] == "image_not_found"
    bad = _import(uploader, "Not A Reference", grove.slug)
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_image_reference"
    assert _import(uploader, registry.ref("forest/x", "1"), "no-such-grove").json()["code"] == "grove_not_found"

    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    settings.FOREST_OCI_INSECURE_REGISTRIES = [f"127.0.0.1:{port}"]
    down = _import(uploader, f"127.0.0.1:{port}/forest/app:1", grove.slug)
    assert down.status_code == 502 and down.json()["code"] == "registry_unreachable"

    # A registry that accepts the connection and never answers: the timeout is the clear error.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept():
        silent.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(silent.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    host = f"127.0.0.1:{silent.getsockname()[1]}"
    settings.FOREST_OCI_INSECURE_REGISTRIES = [host]
    settings.FOREST_OCI_TIMEOUT_S = 0.5
    try:
        hung = _import(uploader, f"{host}/forest/app:1", grove.slug)
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        silent.close()
    assert hung.status_code == 502 and hung.json()["code"] == "registry_unreachable"
    assert "0.5 s" in hung.json()["detail"]
    assert not Artifact.objects.exists()


def test_an_unknown_pinned_digest_is_image_not_found(registry):
    repo = f"forest/pin-{uuid.uuid4().hex[:8]}"
    registry.push_image(repo, tag="t")
    wrong = "sha256:" + "0" * 64
    with pytest.raises(services.ForestError) as exc:
        services.oci_image_inspect(reference=registry.ref(repo, wrong), platforms=["linux/amd64"])
    assert exc.value.code == "image_not_found"  # the registry verifies digests itself


def test_require_oci_image_refuses_a_cas_digest():
    blob = services.artifact_blob_create(chunks=[b"not a container"])
    with pytest.raises(services.ForestError) as exc:
        services.require_oci_image(blob)
    assert exc.value.code == "artifact_not_oci_image" and exc.value.extra["storage_kind"] == "cas"
    image = Artifact.objects.create(digest=blob.digest, storage_kind="oci_registry", reference="r/app@" + blob.digest)
    assert services.require_oci_image(image) is image
    with pytest.raises(services.ForestError) as exc:
        services.require_cas_blob(image)
    assert exc.value.code == "artifact_not_cas_blob"


@pytest.fixture
def lying_registry(settings):
    """A registry that answers with bytes that are not what was asked for. Real registries verify digests
    themselves, so this one is a small HTTP server of the test's own: what is tested is that Host trusts
    no registry's bytes without hashing them."""
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                       "digest": "sha256:" + "c" * 64, "size": 10}, "layers": []}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = manifest if "/manifests/" in self.path else b'{"os": "linux", "architecture": "amd64"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host = f"127.0.0.1:{server.server_address[1]}"
    settings.FOREST_OCI_INSECURE_REGISTRIES = [host]
    yield host
    server.shutdown()
    thread.join()


def test_bytes_that_do_not_hash_to_their_digest_are_refused(lying_registry):
    pinned = f"{lying_registry}/forest/app@sha256:{'a' * 64}"
    with pytest.raises(services.ForestError) as exc:
        services.oci_image_inspect(reference=pinned, platforms=["linux/amd64"])
    assert (exc.value.code, exc.value.status) == ("digest_mismatch", 502)
    # by tag the manifest is taken as served, but a config blob that does not hash to the digest the
    # manifest names is not believed: the platform is unknown, not the one the lie claims
    facts = services.oci_image_inspect(reference=f"{lying_registry}/forest/app:1", platforms=["linux/amd64"])
    assert (facts.platform, facts.platform_source) == ("", "config_unreadable:digest_mismatch")
