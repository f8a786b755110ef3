"""Bearer secrets: ``<prefix>_<key id>.<secret>``, shared by Grove enrollment tokens, Grove credentials
and staff/CI API tokens. Pure: no Django.

Only SHA-256 of the secret is stored. The secrets are 256-bit random, so a fast unsalted hash is
enough (as for API tokens generally: a slow password hash defends low-entropy secrets and would cost
every request); the key id makes lookup one indexed read, and the comparison is constant-time.
A presented value that is not exactly this shape (hex key id, URL-safe secret) is not looked up at
all, so odd bytes in an ``Authorization`` header never reach the database.
"""
from __future__ import annotations

import hashlib
import hmac
import re
import secrets

_SHAPE = re.compile(r"^([a-z]{2,8})_([0-9a-f]{1,32})\.([A-Za-z0-9_-]{1,128})$")


def new_secret(prefix: str) -> tuple[str, str, str]:
    """(full presented value, key id, secret hash)."""
    key_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    return f"{prefix}_{key_id}.{secret}", key_id, hash_secret(secret)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def split(value: str, prefix: str) -> tuple[str, str] | None:
    """(key id, secret) from a presented value, or None if it is not of this kind."""
    match = _SHAPE.match(value) if isinstance(value, str) else None
    if match is None or match.group(1) != prefix:
        return None
    return match.group(2), match.group(3)


def matches(secret: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_secret(secret), stored_hash)
