"""The content-addressed store on a filesystem: blobs named by their sha256, written atomically and
verified while streaming. Pure Python, no Django: the root directory is passed in."""
from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path

from apps.core.errors import PayloadTooLarge, ValidationFailed

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


def check_digest(digest: str, field: str = "digest") -> str:
    if not isinstance(digest, str) or not DIGEST_RE.match(digest):
        raise ValidationFailed("invalid_digest", "A digest is 'sha256:' and 64 lowercase hex digits.", field=field)
    return digest


class BlobStore:
    def __init__(self, root: Path):
        self.root = Path(root)

    def path(self, digest: str) -> Path:
        hexdigest = check_digest(digest).split(":", 1)[1]
        return self.root / "sha256" / hexdigest[:2] / hexdigest

    def exists(self, digest: str) -> bool:
        return self.path(digest).is_file()

    def put(self, chunks: Iterable[bytes], *, expected_digest: str | None, max_bytes: int) -> tuple[str, int]:
        """Store a stream; returns (digest, size). Refuses a digest mismatch or an oversized stream
        before anything becomes visible under its name."""
        if expected_digest is not None:
            check_digest(expected_digest)
        self.root.mkdir(parents=True, exist_ok=True)
        hasher = hashlib.sha256()
        size = 0
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".upload-")
        try:
            with os.fdopen(fd, "wb") as out:
                for chunk in chunks:
                    size += len(chunk)
                    if size > max_bytes:
                        raise PayloadTooLarge("blob_too_large", f"The blob exceeds the limit of {max_bytes} bytes.")
                    hasher.update(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            digest = f"sha256:{hasher.hexdigest()}"
            if expected_digest is not None and digest != expected_digest:
                raise ValidationFailed("digest_mismatch", f"The bytes hash to {digest}, not {expected_digest}.",
                                       field="digest")
            final = self.path(digest)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, final)
            return digest, size
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
