"""The S3 content-addressed store (AWS S3, MinIO, Ceph RGW, moto: anything speaking the S3 API with
SigV4) and bucket provisioning. No Django: ``services.blob_store()`` passes the configuration.

Layout under the configured prefix: ``sha256/<64 hex>`` for blobs, ``uploads/<uuid>`` for staged
uploads. An upload streams into ``uploads/`` (multipart, constant memory, hashed as it passes),
is verified, then copied server-side under its digest and the staged object deleted. Several Host
replicas share one bucket, so any replica serves any upload.
"""
from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from apps.artifacts.digests import DIGEST_RE, check_digest
from apps.artifacts.store import BlobStore, DigestingReader, Staged, StoredBlob
from apps.core.errors import ForestError, NotFound, ServiceUnavailable, ValidationFailed

CHUNK = 1 << 20
MISSING_BUCKET_CODES = {"NoSuchBucket"}
BUCKET_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
IPV4_RE = re.compile(r"^\d+\.\d+\.\d+\.\d+$")


@dataclass(frozen=True)
class S3Settings:
    bucket: str
    region: str = "us-east-1"
    endpoint_url: str | None = None
    prefix: str = ""
    access_key_id: str | None = None
    secret_access_key: str | None = None
    timeout_s: float = 30.0


def s3_client(config: S3Settings):
    """A SigV4 client (botocore signs every request; ``s3v4`` is forced so MinIO/RGW behave as AWS).
    A custom endpoint (MinIO, RGW, moto) gets path-style addressing, which needs no wildcard DNS; AWS
    keeps botocore's virtual-hosted default."""
    addressing = "path" if config.endpoint_url else "auto"
    return boto3.session.Session().client(
        "s3", region_name=config.region, endpoint_url=config.endpoint_url or None,
        aws_access_key_id=config.access_key_id or None, aws_secret_access_key=config.secret_access_key or None,
        config=Config(signature_version="s3v4", connect_timeout=config.timeout_s, read_timeout=config.timeout_s,
                      retries={"max_attempts": 3, "mode": "standard"}, s3={"addressing_style": addressing}),
    )


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _translate(exc: Exception, config: S3Settings) -> ForestError:
    """botocore's failures as Forest refusals: a missing bucket and an unreachable endpoint are 503s."""
    if isinstance(exc, ClientError):
        code = _error_code(exc)
        if code in MISSING_BUCKET_CODES:
            return ServiceUnavailable("cas_bucket_missing",
                                      f"The artifact bucket '{config.bucket}' does not exist; create it with "
                                      f"'manage.py artifacts provision-bucket'.")
        if code in ("NoSuchKey", "404", "NotFound"):
            return NotFound("artifact_not_found", "No such blob in the content-addressed store.")
        return ServiceUnavailable("cas_unavailable", f"The object store refused the request ({code}).")
    return ServiceUnavailable("cas_unreachable", f"Cannot reach the object store: {exc}.")


class S3BlobStore(BlobStore):
    kind = "s3"

    def __init__(self, config: S3Settings, client=None):
        self.config = config
        self.client = client or s3_client(config)
        self.bucket = config.bucket
        self.prefix = config.prefix.strip("/") + "/" if config.prefix.strip("/") else ""

    def key(self, digest: str) -> str:
        return f"{self.prefix}sha256/{check_digest(digest).split(':', 1)[1]}"

    def check(self) -> None:
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            if _error_code(exc) in ("404", "NoSuchBucket", "NotFound"):
                raise ServiceUnavailable("cas_bucket_missing",
                                         f"The artifact bucket '{self.bucket}' does not exist; create it with "
                                         f"'manage.py artifacts provision-bucket'.") from None
            raise _translate(exc, self.config) from None
        except BotoCoreError as exc:
            raise _translate(exc, self.config) from None

    def stage(self, chunks: Iterable[bytes], *, expected_digest: str | None, max_bytes: int,
              expected_size: int | None = None) -> Staged:
        if expected_digest is not None:
            check_digest(expected_digest)
        name = f"{self.prefix}uploads/{uuid.uuid4().hex}"
        reader = DigestingReader(chunks, max_bytes=max_bytes)
        # One part in flight at a time: memory stays at about one part (8 MiB) whatever the blob size.
        transfer = TransferConfig(multipart_threshold=8 << 20, multipart_chunksize=8 << 20, max_concurrency=1,
                                  use_threads=False)
        try:
            self.client.upload_fileobj(reader, self.bucket, name, Config=transfer)
            return Staged(digest=reader.verify(expected_digest, expected_size), size=reader.size, name=name)
        except BaseException as exc:
            self._delete_key(name)
            if isinstance(exc, ClientError | BotoCoreError):
                raise _translate(exc, self.config) from None
            raise

    def commit(self, staged: Staged) -> None:
        try:
            self.client.copy({"Bucket": self.bucket, "Key": staged.name}, self.bucket, self.key(staged.digest))
        except (ClientError, BotoCoreError) as exc:
            raise _translate(exc, self.config) from None
        self._delete_key(staged.name)

    def discard(self, staged: Staged) -> None:
        self._delete_key(staged.name)

    def _delete_key(self, key: str) -> None:
        # A staged leftover that cannot be deleted now is swept by GC after its grace period.
        with contextlib.suppress(ClientError, BotoCoreError):
            self.client.delete_object(Bucket=self.bucket, Key=key)

    def exists(self, digest: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self.key(digest))
            return True
        except ClientError as exc:
            if _error_code(exc) in ("404", "NoSuchKey", "NotFound"):
                return False
            raise _translate(exc, self.config) from None
        except BotoCoreError as exc:
            raise _translate(exc, self.config) from None

    def open(self, digest: str) -> Iterator[bytes]:
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self.key(digest))["Body"]
        except (ClientError, BotoCoreError) as exc:
            raise _translate(exc, self.config) from None

        def chunks() -> Iterator[bytes]:
            try:
                yield from body.iter_chunks(CHUNK)
            finally:
                body.close()

        return chunks()

    def delete(self, digest: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.key(digest))
        except (ClientError, BotoCoreError) as exc:
            raise _translate(exc, self.config) from None

    def _objects(self, prefix: str) -> Iterator[dict]:
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                yield from page.get("Contents", [])
        except (ClientError, BotoCoreError) as exc:
            raise _translate(exc, self.config) from None

    def blobs(self) -> Iterator[StoredBlob]:
        base = f"{self.prefix}sha256/"
        for item in self._objects(base):
            digest = f"sha256:{item['Key'][len(base):]}"
            if DIGEST_RE.match(digest):
                yield StoredBlob(digest, item["LastModified"])

    def sweep_staging(self, *, before: datetime) -> int:
        removed = 0
        for item in list(self._objects(f"{self.prefix}uploads/")):
            if item["LastModified"] < before:
                self._delete_key(item["Key"])
                removed += 1
        return removed


# --- provisioning -----------------------------------------------------------------------------------

@dataclass
class ProvisionStep:
    name: str
    ok: bool
    detail: str


@dataclass
class ProvisionReport:
    bucket: str
    dry_run: bool
    steps: list[ProvisionStep] = field(default_factory=list)
    would_create: bool = False
    created: bool = False
    existed: bool = False

    @property
    def ok(self) -> bool:
        return all(step.ok for step in self.steps)

    def add(self, name: str, ok: bool, detail: str) -> bool:
        self.steps.append(ProvisionStep(name, ok, detail))
        return ok


def bucket_name_problem(name: str) -> str | None:
    """S3's bucket naming rules (the strict, DNS-compatible set every implementation accepts)."""
    if not BUCKET_NAME_RE.match(name or ""):
        return "3-63 characters of lowercase letters, digits, '.' and '-', starting and ending with a letter or digit"
    if ".." in name or IPV4_RE.match(name) or name.startswith("xn--") or name.endswith("-s3alias"):
        return "no '..', not an IP address, no 'xn--' prefix or '-s3alias' suffix"
    return None


def bucket_provision(config: S3Settings, *, dry_run: bool, client=None) -> ProvisionReport:
    """Create the bucket through the S3 API (SigV4), idempotently. The dry run performs every check the
    real run depends on — name, reachability, credentials, whether the bucket exists and is ours, the
    region constraint — and says whether creation would succeed, so a clean dry run hides no failing
    step. (What no S3 API can show without creating: a policy that denies ``s3:CreateBucket`` alone;
    the report says so.)"""
    report = ProvisionReport(bucket=config.bucket, dry_run=dry_run)
    problem = bucket_name_problem(config.bucket)
    if not report.add("bucket_name", problem is None, problem or f"'{config.bucket}' is a valid bucket name"):
        return report
    client = client or s3_client(config)
    where = config.endpoint_url or f"AWS S3 ({config.region})"
    try:
        client.list_buckets()
    except EndpointConnectionError as exc:
        report.add("reachable", False, f"cannot reach {where}: {exc}")
        return report
    except ClientError as exc:
        report.add("reachable", True, f"{where} answered")
        report.add("credentials", False, f"{where} refused the credentials ({_error_code(exc)})")
        return report
    except BotoCoreError as exc:
        report.add("reachable", False, f"cannot talk to {where}: {exc}")
        return report
    report.add("reachable", True, f"{where} answered")
    report.add("credentials", True, "the signed (SigV4) request was accepted")
    try:
        client.head_bucket(Bucket=config.bucket)
        report.existed = True
        report.add("bucket", True, f"'{config.bucket}' exists and these credentials can use it; nothing to create")
        return report
    except ClientError as exc:
        code = _error_code(exc)
        if code in ("403", "AccessDenied"):
            report.add("bucket", False, f"'{config.bucket}' exists but belongs to someone else or denies access")
            return report
        if code not in ("404", "NoSuchBucket", "NotFound"):
            report.add("bucket", False, f"checking '{config.bucket}' failed ({code})")
            return report
    report.add("bucket", True, f"'{config.bucket}' does not exist yet")
    create_args: dict = {"Bucket": config.bucket}
    if config.region and config.region != "us-east-1":
        create_args["CreateBucketConfiguration"] = {"LocationConstraint": config.region}
    report.add("region", True, f"will create in {config.region}"
               + (" (no LocationConstraint: us-east-1)" if "CreateBucketConfiguration" not in create_args else ""))
    if dry_run:
        report.would_create = True
        report.add("create", True, f"would create '{config.bucket}' (permission to create is proven only by "
                                   f"creating; every other step above has been checked)")
        return report
    try:
        client.create_bucket(**create_args)
    except ClientError as exc:
        if _error_code(exc) in ("BucketAlreadyOwnedByYou",):
            report.existed = True
            report.add("create", True, f"'{config.bucket}' already exists and is ours")
            return report
        report.add("create", False, f"creating '{config.bucket}' failed ({_error_code(exc)}): {exc}")
        return report
    report.created = True
    report.add("create", True, f"created '{config.bucket}'")
    return report


def validate_prefix(prefix: str) -> str:
    if prefix and (prefix.startswith("/") or ".." in prefix.split("/")):
        raise ValidationFailed("invalid_setting", "FOREST_CAS_S3_PREFIX must be a relative key prefix.",
                               field="FOREST_CAS_S3_PREFIX")
    return prefix
