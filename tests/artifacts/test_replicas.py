"""Two Host web processes (uvicorn, ASGI, as production runs them) on the S3 backend share one bucket and
one database: each serves the other's uploads, verified by digest."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx
import pytest
from django.contrib.auth.models import Permission
from rest_framework.authtoken.models import Token

from tests.artifacts.conftest import free_port, sha, stop, wait_until_up
from tests.factories import UserFactory
from tests.pipelines.conftest import _test_database_url

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def token(transactional_db) -> str:
    user = UserFactory(username="replica-user")
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="artifacts",
                                                        codename__in=["add_artifact", "view_artifact"]))
    return Token.objects.create(user=user).key


@pytest.fixture
def replicas(s3_server, s3_bucket, tmp_path):
    env = {**os.environ, **s3_server.env(s3_bucket), "DATABASE_URL": _test_database_url(),
           "DJANGO_SETTINGS_MODULE": "forest_host.settings", "SECRET_KEY": "forest-test-secret-key-not-for-production",
           "DEBUG": "0", "SECURE_SSL_REDIRECT": "0", "ALLOWED_HOSTS": "127.0.0.1,localhost", "LOG_LEVEL": "WARNING",
           "FLAGS_CACHE_TTL_S": "0"}
    started = []
    for index in range(2):
        port = free_port()
        log = tmp_path / f"web-{index}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen([str(ROOT / ".venv/bin/uvicorn"), "forest_host.asgi:application", "--host",
                                     "127.0.0.1", "--port", str(port), "--no-access-log"],
                                    cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        started.append(proc)
        wait_until_up(f"http://127.0.0.1:{port}/healthz", proc, log)
        started[-1].url = f"http://127.0.0.1:{port}"
    yield started
    for proc in started:
        stop(proc)


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
