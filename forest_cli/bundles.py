"""Native workload bundles, the producing side: build a directory into a reproducible tar.gz, sign it,
and the key pair that does it.

The format is what ``forest-agent`` verifies (agent/src/forest_agent/native/bundles.py and signing.py):
the bundle is a gzip-compressed tar; its digest is ``sha256:<hex of the tar.gz bytes>``; the signature is
Ed25519 over that digest string's ASCII bytes, base64-encoded, uploaded beside the blob with the key id the
agent knows the public key by (``--trusted-key ID=PATH``). The CLI may not import the agent (import-linter
contract), so that one sentence is the shared definition and tests/cli/test_bundles.py holds both sides to
it: what this module builds and signs goes through the agent's own ``TrustedKeys.verify`` and
``extract_tar``.

The private key signs (it stays with whoever publishes); the public key verifies (it goes to every agent).
Each side names the other when handed the wrong one.
"""
from __future__ import annotations

import base64
import gzip
import hashlib
import io
import os
import stat
import tarfile
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

MEDIA_TYPE = "application/gzip"


class BundleError(Exception):
    """A refusal with a stable code, shaped like Host's errors so the CLI prints both the same way."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code, self.detail = code, detail


def build(source: Path) -> bytes:
    """``source``'s files as a tar.gz whose bytes depend only on names, contents and the executable bit
    (sorted, owner root, mtime 0), so the same directory always has the same digest. Refuses what the
    agent's extractor would: device files, FIFOs and sockets, and symlinks that leave the directory."""
    if not source.is_dir():
        raise BundleError("bundle_source_missing", f"{source} is not a directory; build takes the directory "
                                                   "whose files the workload runs from.")
    root = source.resolve()
    buffer = io.BytesIO()
    # gzip's own header carries a time and a name: fixed here so the digest is reproducible.
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for path in _walk(root):
            name = path.relative_to(root).as_posix()
            mode = path.lstat().st_mode
            info = tarfile.TarInfo(name)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            if stat.S_ISLNK(mode):
                target = os.readlink(path)
                if not (path.parent / target).resolve().is_relative_to(root):
                    raise BundleError("bundle_path_escape", f"{name} links to {target}, outside {source}; "
                                                            "the agent refuses such a bundle.")
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
                tar.addfile(info)
            elif stat.S_ISDIR(mode):
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif stat.S_ISREG(mode):
                info.size, info.mode = path.stat().st_size, 0o755 if mode & 0o111 else 0o644
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                raise BundleError("bundle_special_file", f"{name} is not a file, directory or symlink; "
                                                         "the agent refuses device files, FIFOs and sockets.")
    return buffer.getvalue()


def _walk(root: Path) -> list[Path]:
    found: list[Path] = []
    for directory, dirs, files in os.walk(root):
        dirs.sort()
        base = Path(directory)
        for name in sorted(dirs + files):
            found.append(base / name)
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def digest_of(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def sign(key: Ed25519PrivateKey, digest: str) -> str:
    """The signature the agent checks: Ed25519 over the digest string, base64."""
    return base64.b64encode(key.sign(digest.encode("ascii"))).decode("ascii")


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """The signing key at ``path`` (PEM PKCS#8 or OpenSSH); a public key is refused saying which is which."""
    try:
        data = path.read_bytes().strip()
    except OSError as exc:
        raise BundleError("key_unreadable", f"Cannot read signing key {path}: {exc.strerror}.") from None
    if data.startswith((b"-----BEGIN PUBLIC KEY", b"ssh-ed25519 ")):
        raise BundleError("key_is_public", f"{path} is a public key. Signing needs the private key (e.g. "
                                           f"release.key from `forest bundles keygen`); the public key "
                                           f"(release.pem) is the one each agent verifies with "
                                           f"(--trusted-key ID=PATH).")
    key: object
    try:
        if data.startswith(b"-----BEGIN OPENSSH PRIVATE KEY"):
            key = serialization.load_ssh_private_key(data, password=None)
        else:
            key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise BundleError("key_invalid", f"{path} is not an unencrypted Ed25519 private key in PEM or "
                                         f"OpenSSH form: {exc}.") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise BundleError("key_invalid", f"{path} is a {type(key).__name__}; bundles are signed with Ed25519.")
    return key


def keygen(private_path: Path, public_path: Path) -> Ed25519PublicKey:
    """A new key pair: the private key (mode 0600, never overwritten) and the public key beside it."""
    for path in (private_path, public_path):
        if path.exists():
            raise BundleError("key_exists", f"{path} already exists; keygen never overwrites a key.")
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(private)
    public_path.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                          serialization.PublicFormat.SubjectPublicKeyInfo))
    return key.public_key()
