"""Writes for artifacts: storing a blob in the CAS and recording it."""
from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable

from django.conf import settings

from apps.artifacts.choices import StorageKind
from apps.artifacts.models import Artifact
from apps.artifacts.store import BlobStore
from apps.core.errors import NotFound, ValidationFailed


def blob_store() -> BlobStore:
    return BlobStore(settings.FOREST_CAS_ROOT)


def artifact_blob_create(*, chunks: Iterable[bytes], expected_digest: str | None = None, media_type: str = "",
                         signature: str = "", signing_key_id: str = "") -> Artifact:
    """Store bytes in the CAS (verified against ``expected_digest`` when given) and record the artifact."""
    if signature:
        try:
            if len(base64.b64decode(signature, validate=True)) != 64:
                raise ValueError
        except (binascii.Error, ValueError):
            raise ValidationFailed("invalid_signature", "A signature is a base64 Ed25519 signature (64 bytes).",
                                   field="signature") from None
        if not signing_key_id:
            raise ValidationFailed("field_required", "A signature needs the id of the key that made it.",
                                   field="key_id")
    digest, size = blob_store().put(chunks, expected_digest=expected_digest, max_bytes=settings.FOREST_MAX_BLOB_BYTES)
    artifact, _ = Artifact.objects.update_or_create(
        digest=digest, storage_kind=StorageKind.CAS, reference=digest,
        defaults={"media_type": media_type, "size": size, "signature": signature,
                  "signing_key_id": signing_key_id},
    )
    return artifact


def artifact_cas_get(*, digest: str) -> Artifact:
    artifact = Artifact.objects.filter(digest=digest, storage_kind=StorageKind.CAS).first()
    if artifact is None or not blob_store().exists(digest):
        raise NotFound("artifact_not_found", f"No blob {digest} in the content-addressed store.")
    return artifact
