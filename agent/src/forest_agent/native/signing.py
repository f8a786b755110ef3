"""Trusted bundle-signing keys and Ed25519 verification over the digest string `sha256:<hex>`.

Keys come from a directory (each file's stem is its key id) and/or `--trusted-key ID=PATH` flags.
A key file may be a PEM public key, an OpenSSH `ssh-ed25519 ...` line, 32 raw bytes, or those
32 bytes in base64 or hex.
"""

from __future__ import annotations

import base64
import binascii
import re
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_pem_public_key, load_ssh_public_key

from forest_agent.errors import BundleRefused, ConfigError

_PRIVATE_KEY = re.compile(rb"^-----BEGIN [A-Z ]*PRIVATE KEY-----")
_KEY_SUFFIXES = {".pem", ".pub", ".key", ".raw", ".b64", ".hex", ""}


def load_public_key(path: Path) -> Ed25519PublicKey:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read trusted key {path}: {exc.strerror}") from exc
    key: object | None = None
    stripped = data.strip()
    if _PRIVATE_KEY.search(stripped[:64]):
        # The commonest mistake: handing the agent the signing key. Refuse at start, naming both roles.
        raise ConfigError(
            f"trusted key {path} is a PRIVATE key; the agent verifies bundles with the PUBLIC key "
            f"(release.pem from `forest bundles keygen`, or `openssl pkey -in {path} -pubout`). "
            "The private key signs (`forest bundles publish --key`) and should not be on this machine"
        )
    try:
        if stripped.startswith(b"-----BEGIN"):
            key = load_pem_public_key(stripped)
        elif stripped.startswith(b"ssh-ed25519 "):
            key = load_ssh_public_key(stripped)
        elif len(data) == 32:
            key = Ed25519PublicKey.from_public_bytes(data)
        else:
            raw = _decode_text_key(stripped)
            key = Ed25519PublicKey.from_public_bytes(raw) if raw is not None else None
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"trusted key {path} is not a valid Ed25519 public key: {exc}") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise ConfigError(
            f"trusted key {path} is not an Ed25519 public key (PEM, ssh-ed25519, raw, base64 or hex)"
        )
    return key


def _decode_text_key(text: bytes) -> bytes | None:
    for decode in (binascii.unhexlify, lambda t: base64.b64decode(t, validate=True)):
        try:
            raw = decode(text)
        except (binascii.Error, ValueError):
            continue
        if len(raw) == 32:
            return raw
    return None


class TrustedKeys:
    def __init__(self, keys: dict[str, Ed25519PublicKey]) -> None:
        self.keys = dict(keys)

    @classmethod
    def load(cls, *, keys_dir: Path | None = None, key_flags: list[str] | None = None) -> TrustedKeys:
        keys: dict[str, Ed25519PublicKey] = {}
        if keys_dir is not None:
            if not keys_dir.is_dir():
                raise ConfigError(f"--trusted-keys-dir {keys_dir} is not a directory")
            for path in sorted(keys_dir.iterdir()):
                if path.is_file() and not path.name.startswith(".") and path.suffix in _KEY_SUFFIXES:
                    keys[path.stem] = load_public_key(path)
        for flag in key_flags or []:
            key_id, sep, file_name = flag.partition("=")
            if not sep or not key_id or not file_name:
                raise ConfigError(f"--trusted-key must look like KEY_ID=PATH, got {flag!r}")
            keys[key_id] = load_public_key(Path(file_name))
        return cls(keys)

    def __bool__(self) -> bool:
        return bool(self.keys)

    def verify(self, *, key_id: str, digest: str, signature_b64: str) -> None:
        key = self.keys.get(key_id)
        if key is None:
            raise BundleRefused(
                f"bundle is signed with key {key_id!r}, which this agent does not trust",
                code="bundle_key_unknown",
            )
        try:
            signature = base64.b64decode(signature_b64, validate=True)
        except (binascii.Error, ValueError):
            raise BundleRefused(
                "bundle signature is not valid base64", code="bundle_signature_invalid"
            ) from None
        try:
            key.verify(signature, digest.encode("ascii"))
        except InvalidSignature:
            raise BundleRefused(
                f"bundle signature does not verify with trusted key {key_id!r}",
                code="bundle_signature_invalid",
            ) from None
