"""The S3 backend against moto in server mode (real HTTP, SigV4-signed by botocore): verified streaming
uploads, nothing left behind on a bad upload, a missing bucket (503 for uploads, skipped by GC), and
bucket provisioning with its dry run."""
from __future__ import annotations

import json
import subprocess
import sys

import boto3
import httpx
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from apps.artifacts import services
from apps.artifacts.models import Artifact
from apps.artifacts.s3 import bucket_provision
from tests.artifacts.conftest import V1, free_port, sha, stop, wait_until_up

pytestmark = pytest.mark.django_db


def _upload(client, data: bytes, **params):
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return client.post(f"{V1}/artifacts/blobs{'?' + query if query else ''}", data=data,
                       content_type="application/octet-stream")


def test_upload_streams_into_the_bucket_under_its_digest(uploader, s3_server, s3_bucket):
    data = bytes(range(256)) * 40_000  # ~10 MB: a multipart upload of two parts
    response = _upload(uploader, data, digest=sha(data))
    assert response.status_code == 201, response.json()
    assert s3_server.keys(s3_bucket) == [f"sha256/{sha(data)[7:]}"]  # the staged upload is gone
    download = uploader.get(f"{V1}/artifacts/{sha(data)}/blob")
    assert download.status_code == 200 and b"".join(download.streaming_content) == data
    assert download["Content-Length"] == str(len(data))


def test_bad_uploads_leave_nothing_in_the_bucket(uploader, s3_server, s3_bucket, settings):
    assert _upload(uploader, b"real", digest=sha(b"fake")).json()["code"] == "digest_mismatch"
    settings.FOREST_MAX_BLOB_BYTES = 1000
    assert _upload(uploader, b"x" * 1001).json()["code"] == "blob_too_large"
    with pytest.raises(services.ForestError) as exc:  # oversize found while streaming (no length announced)
        services.artifact_blob_create(chunks=iter([b"x" * 600, b"y" * 600]))
    assert exc.value.code == "blob_too_large"
    assert s3_server.keys(s3_bucket) == [] and not Artifact.objects.exists()
    assert s3_server.client.list_multipart_uploads(Bucket=s3_bucket).get("Uploads", []) == []


def test_a_missing_bucket_is_503_for_uploads_and_skipped_by_gc(uploader, s3_settings, caplog):
    response = _upload(uploader, b"bytes")
    assert response.status_code == 503
    assert response.json()["code"] == "cas_bucket_missing" and s3_settings in response.json()["detail"]
    assert not Artifact.objects.exists()
    report = services.artifact_gc()
    assert (report["skipped"], report["removed"]) == ("cas_bucket_missing", 0)
    assert "artifact gc skipped" in caplog.text
    gc = uploader.post(f"{V1}/artifacts/gc", {}, format="json")
    assert gc.status_code == 200 and gc.json()["skipped"] == "cas_bucket_missing"


def test_an_unreachable_endpoint_is_503(uploader, settings, s3_settings):
    settings.FOREST_CAS_S3_ENDPOINT_URL = f"http://127.0.0.1:{free_port()}"
    settings.FOREST_CAS_S3_TIMEOUT_S = 2
    response = _upload(uploader, b"bytes")
    assert response.status_code == 503 and response.json()["code"] == "cas_unreachable"


def test_provision_bucket_dry_run_then_real_then_idempotent(s3_server, s3_settings, capsys):
    call_command("artifacts", "provision-bucket", "--dry-run")
    out = capsys.readouterr().out
    assert "[ok] credentials" in out and "does not exist yet" in out and "creation would succeed" in out
    assert s3_settings not in [b["Name"] for b in s3_server.client.list_buckets()["Buckets"]]  # dry: nothing made
    call_command("artifacts", "provision-bucket")
    assert "created" in capsys.readouterr().out
    assert s3_settings in [b["Name"] for b in s3_server.client.list_buckets()["Buckets"]]
    call_command("artifacts", "provision-bucket")
    assert "already present; nothing changed" in capsys.readouterr().out
    call_command("artifacts", "provision-bucket", "--dry-run")
    assert "the bucket already exists; nothing to do" in capsys.readouterr().out


def test_provision_dry_run_reports_the_step_that_would_fail(settings, s3_settings, capsys):
    settings.FOREST_CAS_S3_BUCKET = "Bad_Name"
    with pytest.raises(CommandError, match="not provisioned"):
        call_command("artifacts", "provision-bucket", "--dry-run")
    assert "[FAIL] bucket_name" in capsys.readouterr().out
    settings.FOREST_CAS_S3_BUCKET = s3_settings
    settings.FOREST_CAS_S3_ENDPOINT_URL = f"http://127.0.0.1:{free_port()}"
    settings.FOREST_CAS_S3_TIMEOUT_S = 2
    with pytest.raises(CommandError):
        call_command("artifacts", "provision-bucket", "--dry-run")
    assert "[FAIL] reachable" in capsys.readouterr().out


def test_provisioning_in_another_region_sends_the_location_constraint(s3_server, s3_settings):
    config = services.s3_settings()
    config = type(config)(**{**config.__dict__, "region": "eu-west-1"})
    report = bucket_provision(config, dry_run=False)
    assert report.created and report.ok
    assert s3_server.client.get_bucket_location(Bucket=s3_settings)["LocationConstraint"] == "eu-west-1"


@pytest.fixture
def authenticating_s3(tmp_path):
    """A moto server of its own with IAM authentication on (so bad credentials are refused, policies
    enforced), and one IAM user allowed everything but ``s3:CreateBucket``, one allowed everything."""
    port = free_port()
    log = tmp_path / "moto-auth.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(f"{endpoint}/moto-api/", proc, log)
        httpx.post(f"{endpoint}/moto-api/reset-auth", content=b"6").raise_for_status()  # 6 unauthenticated calls
        iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="boot",
                           aws_secret_access_key="boot")
        keys = {}
        for name, policy in (("admin", {"Effect": "Allow", "Action": "*", "Resource": "*"}),
                             ("no-create", {"Effect": "Deny", "Action": "s3:CreateBucket", "Resource": "*"})):
            iam.create_user(UserName=name)
            statements = [policy] if name == "admin" else [{"Effect": "Allow", "Action": "*", "Resource": "*"}, policy]
            iam.put_user_policy(UserName=name, PolicyName="p",
                                PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": statements}))
            key = iam.create_access_key(UserName=name)["AccessKey"]
            keys[name] = (key["AccessKeyId"], key["SecretAccessKey"])
        yield endpoint, keys
    finally:
        stop(proc)


def test_provisioning_with_iam_credentials(authenticating_s3, settings, capsys):
    endpoint, keys = authenticating_s3
    settings.FOREST_CAS_S3_ENDPOINT_URL, settings.FOREST_CAS_S3_BUCKET = endpoint, "forest-iam-test"
    settings.FOREST_CAS_S3_ACCESS_KEY_ID, settings.FOREST_CAS_S3_SECRET_ACCESS_KEY = "AKIAWRONG0000000000", "nope"
    with pytest.raises(CommandError):
        call_command("artifacts", "provision-bucket", "--dry-run")
    assert "[FAIL] credentials" in capsys.readouterr().out

    # Denied s3:CreateBucket alone: the dry run can only say so is unprovable; the real run reports the denial.
    settings.FOREST_CAS_S3_ACCESS_KEY_ID, settings.FOREST_CAS_S3_SECRET_ACCESS_KEY = keys["no-create"]
    call_command("artifacts", "provision-bucket", "--dry-run")
    assert "permission to create is proven only by creating" in capsys.readouterr().out
    with pytest.raises(CommandError, match="not provisioned"):
        call_command("artifacts", "provision-bucket")
    assert "[FAIL] create" in capsys.readouterr().out

    settings.FOREST_CAS_S3_ACCESS_KEY_ID, settings.FOREST_CAS_S3_SECRET_ACCESS_KEY = keys["admin"]
    call_command("artifacts", "provision-bucket")
    assert "created" in capsys.readouterr().out
