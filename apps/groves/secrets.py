"""Bearer secrets for enrollment tokens and Grove credentials: ``<prefix>_<key id>.<secret>``.

Only SHA-256 of the secret is stored. The secrets are 256-bit random, so a fast unsalted hash is
enough (as for API tokens generally); the key id makes lookup one indexed read.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets

TOKEN_PREFIX = "fet"
CREDENTIAL_PREFIX = "fgc"


def new_secret(prefix: str) -> tuple[str, str, str]:
    """(full presented value, key id, secret hash)."""
    key_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    return f"{prefix}_{key_id}.{secret}", key_id, hash_secret(secret)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def split(value: str, prefix: str) -> tuple[str, str] | None:
    """(key id, secret) from a presented value, or None if it is not of this kind."""
    head, _, secret = value.partition(".")
    kind, _, key_id = head.partition("_")
    if kind != prefix or not key_id or not secret or len(key_id) > 32:
        return None
    return key_id, secret


def matches(secret: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_secret(secret), stored_hash)
