"""Real components for artifact tests: Debian's ``docker-registry`` (the CNCF distribution registry) and
``moto`` in server mode (S3 over real HTTP with SigV4), each started as a subprocess on a free loopback
port; users whose API tokens carry exactly the permissions a test gives them."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import boto3
import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.contrib.auth.models import Permission
from rest_framework.test import APIClient

from apps.artifacts.services import artifact_blob_create
from apps.workloads import services as workload_services
from tests.factories import UserFactory, api_token_for
from tests.pipelines.conftest import flag_on, wire  # noqa: F401 - shared fixtures

REGISTRY_BIN = shutil.which("docker-registry") or "/usr/bin/docker-registry"
V1 = "/api/forest/v1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_up(url: str, proc: subprocess.Popen, log: Path, timeout: float = 30.0) -> None:
    """Poll until the server answers (or died): readiness is an event we can only observe by asking."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{proc.args[0]} exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            httpx.get(url, timeout=1.0)
            return
        except httpx.HTTPError:
            time.sleep(0.05)
    pytest.fail(f"{url} did not come up within {timeout} s")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def sha(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


# --- the OCI registry ------------------------------------------------------------------------------

class Registry:
    """A running registry plus the plain-HTTP pushes of the distribution spec (monolithic blob upload,
    manifest PUT): tests build real images, indexes and configs byte by byte."""

    def __init__(self, host: str):
        self.host = host
        self.base = f"http://{host}"

    def push_blob(self, repo: str, data: bytes) -> dict:
        digest = sha(data)
        start = httpx.post(f"{self.base}/v2/{repo}/blobs/uploads/")
        assert start.status_code == 202, start.text
        location = start.headers["location"]
        location = location if location.startswith("http") else self.base + location
        # The Location carries the upload's state in its query: append the digest, never replace it.
        location += ("&" if "?" in location else "?") + f"digest={digest}"
        done = httpx.put(location, content=data,
                         headers={"Content-Type": "application/octet-stream"})
        assert done.status_code == 201, done.text
        return {"digest": digest, "size": len(data)}

    def push_manifest(self, repo: str, reference: str, document: dict, media_type: str | None = None) -> dict:
        data = json.dumps(document).encode()
        media_type = media_type or document["mediaType"]
        response = httpx.put(f"{self.base}/v2/{repo}/manifests/{reference}", content=data,
                             headers={"Content-Type": media_type})
        assert response.status_code == 201, response.text
        return {"mediaType": media_type, "digest": sha(data), "size": len(data)}

    def push_image(self, repo: str, *, os_name: str = "linux", arch: str = "amd64", variant: str = "",
                   tag: str | None = None, config: bytes | None = None, docker: bool = False) -> dict:
        """One single-platform image: a config naming its platform, one layer, a manifest."""
        if config is None:
            body = {"os": os_name, "architecture": arch, "rootfs": {"type": "layers", "diff_ids": []},
                    "config": {}}
            if variant:
                body["variant"] = variant
            config = json.dumps(body).encode()
        layer = f"layer for {os_name}/{arch}/{variant} {uuid.uuid4()}".encode()
        cfg = self.push_blob(repo, config)
        lay = self.push_blob(repo, layer)
        if docker:
            manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", **cfg},
                        "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", **lay}]}
        else:
            manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **cfg},
                        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **lay}]}
        pushed = self.push_manifest(repo, tag or sha(json.dumps(manifest).encode()), manifest)
        platform = {"os": os_name, "architecture": arch, **({"variant": variant} if variant else {})}
        return {**pushed, "platform": platform}

    def push_index(self, repo: str, tag: str, children: list[dict], *, docker: bool = False) -> dict:
        media_type = ("application/vnd.docker.distribution.manifest.list.v2+json" if docker
                      else "application/vnd.oci.image.index.v1+json")
        index = {"schemaVersion": 2, "mediaType": media_type, "manifests": children}
        return self.push_manifest(repo, tag, index)

    def ref(self, repo: str, tag_or_digest: str) -> str:
        sep = "@" if tag_or_digest.startswith("sha256:") else ":"
        return f"{self.host}/{repo}{sep}{tag_or_digest}"


@pytest.fixture(scope="session")
def registry_server(tmp_path_factory):
    if not os.path.exists(REGISTRY_BIN):
        pytest.fail("Debian's docker-registry is not installed (scripts/services-up.sh installs it as root)")
    root = tmp_path_factory.mktemp("registry")
    port = free_port()
    config = root / "config.yml"
    config.write_text(f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {root}/data\n"
                      f"  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n")
    log = root / "registry.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen([REGISTRY_BIN, "serve", str(config)], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    wait_until_up(f"http://127.0.0.1:{port}/v2/", proc, log)
    yield Registry(f"127.0.0.1:{port}")
    stop(proc)


@pytest.fixture
def registry(registry_server, settings) -> Registry:
    settings.FOREST_OCI_INSECURE_REGISTRIES = [registry_server.host]
    settings.FOREST_OCI_TIMEOUT_S = 10
    return registry_server


# --- S3 (moto server) ------------------------------------------------------------------------------

class S3Server:
    def __init__(self, endpoint: str):
        self.endpoint = endpoint
        self.client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                                   aws_access_key_id="forest-test", aws_secret_access_key="forest-test-secret")

    def env(self, bucket: str) -> dict[str, str]:
        return {"FOREST_CAS_BACKEND": "s3", "FOREST_CAS_S3_BUCKET": bucket, "FOREST_CAS_S3_ENDPOINT_URL": self.endpoint,
                "FOREST_CAS_S3_REGION": "us-east-1", "FOREST_CAS_S3_ACCESS_KEY_ID": "forest-test",
                "FOREST_CAS_S3_SECRET_ACCESS_KEY": "forest-test-secret"}

    def keys(self, bucket: str) -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("moto")
    port = free_port()
    log = root / "moto.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    wait_until_up(f"http://127.0.0.1:{port}/moto-api/", proc, log)
    yield S3Server(f"http://127.0.0.1:{port}")
    stop(proc)


@pytest.fixture
def s3_settings(s3_server, settings):
    """Point Host at a fresh, not yet created bucket on the moto server; returns its name."""
    bucket = f"forest-test-{uuid.uuid4().hex[:12]}"
    for name, value in s3_server.env(bucket).items():
        setattr(settings, name, value)
    return bucket


@pytest.fixture
def s3_bucket(s3_server, s3_settings) -> str:
    s3_server.client.create_bucket(Bucket=s3_settings)
    return s3_settings


# --- users and their permissions -------------------------------------------------------------------

@pytest.fixture
def user_client(db):
    """An API client for a new user holding exactly ``perms`` (codenames of artifacts' model permissions)."""

    def _make(*perms: str, staff: bool = True) -> APIClient:
        user = UserFactory(username=f"u-{uuid.uuid4().hex[:8]}", is_staff=staff)
        for perm in perms:
            user.user_permissions.add(Permission.objects.get(content_type__app_label="artifacts", codename=perm))
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_for(user)}")
        return client

    return _make


@pytest.fixture
def uploader(user_client) -> APIClient:
    return user_client("add_artifact", "view_artifact", "delete_artifact")


# --- work that references blobs ---------------------------------------------------------------------

def signed_bundle(data: bytes, *, platform: str = ""):
    """A signed native bundle in the CAS (what the release pipeline uploads)."""
    digest = sha(data)
    signature = base64.b64encode(Ed25519PrivateKey.generate().sign(digest.encode())).decode()
    return artifact_blob_create(chunks=[data], expected_digest=digest, signature=signature, signing_key_id="release",
                                platform=platform)


@pytest.fixture
def native_runtime(fresh_grove, settings):
    """Native dispatch on; ``native_runtime(name, platforms)`` makes a native runtime Grove that advertises
    native.workload. Returns (grove, credential)."""
    settings.FOREST_NATIVE_WORKLOAD_DISPATCH = True

    def _make(name: str = "mac", platforms=("darwin/arm64",)):
        return fresh_grove(name=name, roles=("runtime",), platforms=platforms,
                           change_kinds=["native.job", "native.workload"])

    return _make


def apply_workload(slug: str, bundle, grove):
    return workload_services.native_workload_apply(body={"slug": slug, "bundle_digest": bundle.digest,
                                                         "command": ["./bin/server"], "grove": grove.slug})
