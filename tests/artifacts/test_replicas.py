"""Host web processes as production runs them (uvicorn, ASGI): two on the S3 backend share one bucket and
one database and serve each other's uploads; and under ASGI an upload's body streams into the view as it
arrives (apps.core.asgi), so a bad upload is refused before the client has sent it all."""
from __future__ import annotations

import hashlib
import os
import socket
import subprocess
from pathlib import Path

import httpx
import psutil
import pytest
from django.contrib.auth.models import Permission

from apps.artifacts.models import Artifact
from tests.artifacts.conftest import free_port, sha, stop, wait_until_up
from tests.console import console_script
from tests.factories import UserFactory, api_token_for
from tests.pipelines.conftest import _test_database_url

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def token(transactional_db) -> str:
    user = UserFactory(username="replica-user")
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="artifacts",
                                                        codename__in=["add_artifact", "view_artifact"]))
    return api_token_for(user)


class Host(subprocess.Popen):
    url = ""


def _start_hosts(count: int, tmp_path: Path, extra_env: dict) -> list[Host]:
    env = {**os.environ, **extra_env, "DATABASE_URL": _test_database_url(),
           "DJANGO_SETTINGS_MODULE": "forest_host.settings", "SECRET_KEY": "forest-test-secret-key-not-for-production",
           "DEBUG": "0", "SECURE_SSL_REDIRECT": "0", "ALLOWED_HOSTS": "127.0.0.1,localhost", "LOG_LEVEL": "WARNING",
           "FLAGS_CACHE_TTL_S": "0"}
    started = []
    for index in range(count):
        port = free_port()
        log = tmp_path / f"web-{index}.log"
        with open(log, "ab") as out:
            proc = Host([console_script("uvicorn"), "forest_host.asgi:application", "--host",
                                     "127.0.0.1", "--port", str(port), "--no-access-log"],
                                    cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        proc.url = f"http://127.0.0.1:{port}"
        started.append(proc)
        wait_until_up(f"{proc.url}/healthz", proc, log)
    return started


@pytest.fixture
def hosts(tmp_path):
    started: list[Host] = []

    def _start(count: int, **env) -> list[Host]:
        started.extend(_start_hosts(count, tmp_path, env))
        return started[-count:]

    yield _start
    for proc in started:
        stop(proc)


@pytest.fixture
def replicas(hosts, s3_server, s3_bucket):
    return hosts(2, **s3_server.env(s3_bucket))


@pytest.mark.e2e
def test_each_web_process_serves_the_others_uploads(replicas, token, s3_server, s3_bucket):
    headers = {"Authorization": f"Token {token}"}
    a, b = replicas
    for writer, reader, data in ((a, b, b"uploaded to A " * 50_000), (b, a, b"uploaded to B " * 70_000)):
        digest = sha(data)
        put = httpx.post(f"{writer.url}/api/forest/v1/artifacts/blobs", params={"digest": digest}, content=data,
                         headers={**headers, "Content-Type": "application/octet-stream"}, timeout=60)
        assert put.status_code == 201, put.text
        got = httpx.get(f"{reader.url}/api/forest/v1/artifacts/{digest}/blob", headers=headers, timeout=60)
        assert got.status_code == 200, got.text
        assert got.content == data and got.headers["docker-content-digest"] == digest
    assert len(s3_server.keys(s3_bucket)) == 2


def _raw_post(url: str, token: str, *, length: int, body: bytes) -> bytes:
    """Send headers announcing ``length`` bytes and only ``body``; return what the server answers."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(f"POST /api/forest/v1/artifacts/blobs HTTP/1.1\r\nHost: {host}\r\n"
                     f"Authorization: Token {token}\r\nContent-Type: application/octet-stream\r\n"
                     f"Content-Length: {length}\r\n\r\n".encode() + body)
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
    return reply


@pytest.mark.e2e
def test_under_asgi_a_bad_upload_is_refused_before_it_is_all_sent(hosts, token, tmp_path):
    """With Django's own handler the server would wait for all 10 GB before the view could refuse."""
    cas = tmp_path / "cas"
    (host,) = hosts(1, FOREST_CAS_BACKEND="filesystem", FOREST_CAS_ROOT=str(cas), FOREST_MAX_BLOB_BYTES="1000")
    too_big = _raw_post(host.url, token, length=10 * 1024**3, body=b"x" * 100)
    assert too_big.startswith(b"HTTP/1.1 413") and b'"blob_too_large"' in too_big
    assert not Artifact.objects.exists()
    # an honest upload on the same streamed path is stored whole and verified
    data = b"z" * 999
    ok = httpx.post(f"{host.url}/api/forest/v1/artifacts/blobs", params={"digest": sha(data)}, content=data,
                    headers={"Authorization": f"Token {token}", "Content-Type": "application/octet-stream"})
    assert ok.status_code == 201 and ok.json()["size"] == 999
    assert (cas / "sha256" / sha(data)[7:9] / sha(data)[7:]).read_bytes() == data


@pytest.mark.e2e
def test_under_asgi_big_blobs_stream_both_ways_in_constant_memory(hosts, token, tmp_path):
    """A 96 MiB upload and download through one uvicorn Host: its RSS grows by far less than the blob
    (Django would spool the upload to disk and collect a sync download iterator into memory)."""
    (host,) = hosts(1, FOREST_CAS_BACKEND="filesystem", FOREST_CAS_ROOT=str(tmp_path / "cas"))
    server = psutil.Process(host.pid)
    block = os.urandom(1 << 20)
    size = 96 << 20
    digest = sha(block * 96)
    headers = {"Authorization": f"Token {token}"}

    def body():
        for _ in range(96):
            yield block

    baseline = server.memory_info().rss
    peak = baseline
    put = httpx.post(f"{host.url}/api/forest/v1/artifacts/blobs", params={"digest": digest}, content=body(),
                     headers={**headers, "Content-Type": "application/octet-stream", "Content-Length": str(size)},
                     timeout=120)
    assert put.status_code == 201, put.text
    received = 0
    hasher = hashlib.sha256()
    with httpx.stream("GET", f"{host.url}/api/forest/v1/artifacts/{digest}/blob", headers=headers,
                      timeout=120) as got:
        assert got.status_code == 200
        for chunk in got.iter_bytes():
            received += len(chunk)
            hasher.update(chunk)
            peak = max(peak, server.memory_info().rss)
    assert received == size and f"sha256:{hasher.hexdigest()}" == digest
    assert peak - baseline < 48 << 20, f"Host RSS grew by {(peak - baseline) >> 20} MiB for a 96 MiB blob"
