"""Content digests (``sha256:<64 lowercase hex>``): the one pattern and checker. Pure: no Django."""
from __future__ import annotations

import hashlib
import re

from apps.core.errors import ValidationFailed

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


def sha256_digest(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def check_digest(digest: object, field: str = "digest") -> str:
    if not isinstance(digest, str) or not DIGEST_RE.match(digest):
        raise ValidationFailed("invalid_digest", "A digest is 'sha256:' and 64 lowercase hex digits.", field=field)
    return digest
