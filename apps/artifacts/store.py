"""Content-addressed blob stores: bytes named by their sha256, verified while they stream in.
No Django: each backend gets its configuration from ``services.blob_store()``.

An upload is two steps so the caller can serialise the moment a blob becomes visible with garbage
collection: ``stage`` streams the bytes to a private staging name, hashing and counting as they pass
(a digest mismatch or an oversized stream is refused and the staged bytes removed); ``commit`` moves
them under their digest. Nothing is ever visible under a digest it does not hash to.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from apps.artifacts.digests import DIGEST_RE, check_digest
from apps.core.errors import NotFound, PayloadTooLarge, ValidationFailed

CHUNK = 1 << 20


@dataclass
class Staged:
    digest: str
    size: int
    name: str  # the backend's private staging name


@dataclass(frozen=True)
class StoredBlob:
    digest: str
    modified_at: datetime


class DigestingReader:
    """Wraps a chunk iterator: hashes and counts what passes, refuses past ``max_bytes``. Also a
    file-like object (``read``) so boto3 can stream it into a multipart upload."""

    def __init__(self, chunks: Iterable[bytes], *, max_bytes: int):
        self._chunks = iter(chunks)
        self._buffer = bytearray()
        self.max_bytes = max_bytes
        self.hasher = hashlib.sha256()
        self.size = 0

    def _take(self, chunk: bytes) -> bytes:
        self.size += len(chunk)
        if self.size > self.max_bytes:
            raise PayloadTooLarge("blob_too_large", f"The blob exceeds the limit of {self.max_bytes} bytes.")
        self.hasher.update(chunk)
        return chunk

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._chunks:
            if chunk:
                yield self._take(chunk)

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._buffer) < size:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._buffer += self._take(chunk)
        if size < 0 or size >= len(self._buffer):
            out, self._buffer = bytes(self._buffer), bytearray()
        else:
            out = bytes(self._buffer[:size])
            del self._buffer[:size]
        return out

    @property
    def digest(self) -> str:
        return f"sha256:{self.hasher.hexdigest()}"

    def verify(self, expected_digest: str | None, expected_size: int | None = None) -> str:
        if expected_size is not None and self.size != expected_size:
            raise ValidationFailed("upload_truncated", f"Received {self.size} bytes of the {expected_size} announced; "
                                   f"nothing was stored.", field="body")
        if expected_digest is not None and self.digest != expected_digest:
            raise ValidationFailed("digest_mismatch", f"The bytes hash to {self.digest}, not {expected_digest}.",
                                   field="digest")
        return self.digest


class BlobStore(ABC):
    """What every backend offers (the filesystem one below, ``s3.S3BlobStore``)."""

    kind = "abstract"

    def check(self) -> None:  # noqa: B027 - optional hook: most backends can always take writes
        """Raise ``ServiceUnavailable`` when the store cannot take writes (e.g. a missing bucket)."""

    @abstractmethod
    def stage(self, chunks: Iterable[bytes], *, expected_digest: str | None, max_bytes: int,
              expected_size: int | None = None) -> Staged: ...

    @abstractmethod
    def commit(self, staged: Staged) -> None: ...

    @abstractmethod
    def discard(self, staged: Staged) -> None: ...

    @abstractmethod
    def exists(self, digest: str) -> bool: ...

    @abstractmethod
    def open(self, digest: str) -> Iterator[bytes]: ...

    @abstractmethod
    def delete(self, digest: str) -> None: ...

    @abstractmethod
    def blobs(self) -> Iterator[StoredBlob]: ...

    @abstractmethod
    def sweep_staging(self, *, before: datetime) -> int:
        """Remove staged uploads older than ``before`` (left by a crashed upload); returns how many."""


class FilesystemBlobStore(BlobStore):
    """Blobs under ``<root>/sha256/<2 hex>/<64 hex>``, staged under ``<root>/.uploads/`` on the same
    filesystem so the commit is one atomic rename."""

    kind = "filesystem"

    def __init__(self, root: Path):
        self.root = Path(root)
        self.staging = self.root / ".uploads"

    def path(self, digest: str) -> Path:
        hexdigest = check_digest(digest).split(":", 1)[1]
        return self.root / "sha256" / hexdigest[:2] / hexdigest

    def stage(self, chunks: Iterable[bytes], *, expected_digest: str | None, max_bytes: int,
              expected_size: int | None = None) -> Staged:
        if expected_digest is not None:
            check_digest(expected_digest)
        self.staging.mkdir(parents=True, exist_ok=True)
        reader = DigestingReader(chunks, max_bytes=max_bytes)
        fd, tmp = tempfile.mkstemp(dir=self.staging, prefix="upload-")
        try:
            with os.fdopen(fd, "wb") as out:
                for chunk in reader:
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            return Staged(digest=reader.verify(expected_digest, expected_size), size=reader.size, name=tmp)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def commit(self, staged: Staged) -> None:
        final = self.path(staged.digest)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged.name, final)

    def discard(self, staged: Staged) -> None:
        Path(staged.name).unlink(missing_ok=True)

    def exists(self, digest: str) -> bool:
        return self.path(digest).is_file()

    def open(self, digest: str) -> Iterator[bytes]:
        try:
            handle = self.path(digest).open("rb")
        except FileNotFoundError:
            raise NotFound("artifact_not_found", f"No blob {digest} in the content-addressed store.") from None

        def chunks() -> Iterator[bytes]:
            with handle:
                while chunk := handle.read(CHUNK):
                    yield chunk

        return chunks()

    def delete(self, digest: str) -> None:
        self.path(digest).unlink(missing_ok=True)

    def blobs(self) -> Iterator[StoredBlob]:
        for path in sorted((self.root / "sha256").glob("??/*")):
            digest = f"sha256:{path.name}"
            if DIGEST_RE.match(digest) and path.is_file():
                yield StoredBlob(digest, datetime.fromtimestamp(path.stat().st_mtime, tz=UTC))

    def sweep_staging(self, *, before: datetime) -> int:
        removed = 0
        for path in self.staging.glob("upload-*") if self.staging.is_dir() else ():
            if datetime.fromtimestamp(path.stat().st_mtime, tz=UTC) < before:
                path.unlink(missing_ok=True)
                removed += 1
        return removed
