"""Helpers shared by the agent tests: bundle signing keys, hand-built (possibly hostile) tars, and the one
bounded wait on a condition."""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import time
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat


class Signer:
    """An Ed25519 key pair as Host's bundle signer would hold it."""

    def __init__(self, key_id: str = "release") -> None:
        self.key_id = key_id
        self.private = Ed25519PrivateKey.generate()

    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)

    def write_public(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.key_id}.pem"
        path.write_bytes(self.public_pem())
        return path

    def sign(self, digest: str) -> str:
        return base64.b64encode(self.private.sign(digest.encode())).decode()


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def make_tar(entries: list[tuple[tarfile.TarInfo, bytes | None]], mode: str = "w:gz") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as tar:
        for info, data in entries:
            if data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return buffer.getvalue()


def file_entry(name: str, data: bytes, mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.mode = mode
    return info, data


def special_entry(name: str, kind: bytes, linkname: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info, None


# A tiny workload: answers /healthz, /env (its environment) and /secret-file; `crash` mode exits.
SERVER_PY = b"""
import http.server, json, os, sys
mode, port = sys.argv[1], int(sys.argv[2])
print("server starting in", mode, "mode; env secret:", os.environ.get("API_KEY", "-"), flush=True)
if mode == "crash":
    sys.exit(3)
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def do_GET(self):
        if self.path == "/env":
            body = json.dumps(dict(os.environ)).encode()
        elif self.path == "/secret-file":
            body = open(os.path.join(os.environ["FOREST_SECRETS_DIR"], "API_KEY")).read().encode()
        else:
            body = (mode + " ok").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate: Any, timeout: float = 30.0, what: str = "condition") -> Any:
    """The predicate's first truthy value, asked every 20 ms; an AssertionError naming ``what`` after
    ``timeout`` seconds (a bound on a hang: the wait ends the moment the condition holds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")
