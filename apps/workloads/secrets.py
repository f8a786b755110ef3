"""Encryption at rest for workload secrets (Fernet from ``cryptography``).

The key is ``FOREST_SECRETS_KEY`` when set (a Fernet key), else derived from ``SECRET_KEY``; rotating
SECRET_KEY without setting FOREST_SECRETS_KEY makes stored secrets unreadable, so production sets it.
"""
from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings

from apps.core.errors import ForestError


def _fernet() -> Fernet:
    key = getattr(settings, "FOREST_SECRETS_KEY", "") or base64.urlsafe_b64encode(
        hashlib.sha256(f"forest-secrets:{settings.SECRET_KEY}".encode()).digest()
    ).decode()
    return Fernet(key)


def encrypt(value: str) -> bytes:
    return _fernet().encrypt(value.encode())


def decrypt(ciphertext: bytes) -> str:
    try:
        return _fernet().decrypt(bytes(ciphertext)).decode()
    except InvalidToken:
        raise ForestError("secret_unreadable", "A stored secret cannot be decrypted with this Host's key "
                          "(was FOREST_SECRETS_KEY or SECRET_KEY changed?).") from None
