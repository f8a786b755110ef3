"""``artifact_cas_for_reference`` (raw SQL: the ORM has no ``FOR SHARE``) finds the row its ORM form finds:
docs/architecture.md "Fast paths". Real PostgreSQL."""
from __future__ import annotations

import pytest

from apps.artifacts import services
from apps.artifacts.models import Artifact
from apps.artifacts.vocabulary import StorageKind

pytestmark = pytest.mark.django_db
DIGEST = "sha256:" + "ef" * 32


def _orm(digest: str) -> Artifact | None:
    return Artifact.objects.filter(digest=digest, storage_kind=StorageKind.CAS).order_by("created_at", "id").first()


def test_the_share_locked_read_finds_the_orms_row():
    assert services.artifact_cas_for_reference(digest=DIGEST) is None and _orm(DIGEST) is None
    Artifact.objects.create(digest=DIGEST, storage_kind=StorageKind.OCI_REGISTRY, reference="r/app@" + DIGEST)
    assert services.artifact_cas_for_reference(digest=DIGEST) is None and _orm(DIGEST) is None  # not a blob
    for name in ("b", "a"):
        Artifact.objects.create(digest=DIGEST, storage_kind=StorageKind.CAS, reference=f"cas/{name}", size=1)
    found = services.artifact_cas_for_reference(digest=DIGEST)
    assert found is not None and found.pk == _orm(DIGEST).pk and found.reference == "cas/b"
    assert {f.attname: getattr(found, f.attname) for f in Artifact._meta.concrete_fields} == \
        {f.attname: getattr(_orm(DIGEST), f.attname) for f in Artifact._meta.concrete_fields}
