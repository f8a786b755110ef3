"""Bundle install: stream the download with a size limit, hash while streaming, check the Ed25519
signature over `sha256:<hex>`, then extract safely. Nothing is extracted before the signature holds.

Everything lands inside the directory the caller passes (a generation's own directory); the
downloaded archive is deleted once extracted. Each refusal is a `BundleRefused` with a stable code:
`bundle_download_failed`, `bundle_too_large`, `bundle_size_mismatch`, `bundle_digest_mismatch`,
`bundle_key_unknown`, `bundle_signature_invalid`, `bundle_unreadable`, `bundle_path_escape`,
`bundle_too_many_files`, `bundle_special_file`, `bundle_codesign_invalid`.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from forest_agent.errors import BundleRefused
from forest_agent.native.codesign import verify_apps
from forest_agent.native.extract import ExtractLimits, ExtractResult, extract_tar
from forest_agent.native.signing import TrustedKeys
from forest_agent.oskit import CommandRunner
from forest_agent.wire.messages import BundleRef

log = logging.getLogger(__name__)

ARCHIVE_NAME = "bundle.download"
_CHUNK = 1 << 20
_PROGRESS_EVERY_S = 2.0


@dataclass(frozen=True)
class BundleLimits:
    max_download_bytes: int = 1024**3
    extract: ExtractLimits = ExtractLimits()


@dataclass(frozen=True)
class InstallResult:
    digest: str
    downloaded_bytes: int
    extracted: ExtractResult
    apps_verified: list[str]


class BundleInstaller:
    def __init__(
        self, *, keys: TrustedKeys, limits: BundleLimits, http: httpx.Client | None = None,
        auth_headers_for: Callable[[str], dict[str, str]] | None = None, runner: CommandRunner | None = None,
        platform: str = sys.platform,
    ) -> None:
        self.keys = keys
        self.limits = limits
        self._http = http or httpx.Client(timeout=httpx.Timeout(30.0, read=60.0), follow_redirects=False)
        self._auth_headers_for = auth_headers_for
        self._runner = runner or CommandRunner()
        self._platform = platform

    def install(self, bundle: BundleRef, dest: Path) -> InstallResult:
        """Download, verify and extract `bundle` into `dest/app`. `dest` must exist and be private."""
        archive = dest / ARCHIVE_NAME
        started = time.monotonic()
        size = self._download(bundle, archive)
        # Signature before extraction: an unsigned archive is never even parsed as tar.
        self.keys.verify(key_id=bundle.key_id, digest=bundle.digest, signature_b64=bundle.signature)
        app = dest / "app"
        app.mkdir(mode=0o755)
        try:
            extracted = extract_tar(archive, app, self.limits.extract)
        finally:
            archive.unlink(missing_ok=True)
        apps = verify_apps(app, self._runner) if self._platform == "darwin" else []
        log.info("bundle %s installed: %d bytes, %d entries, %.2fs", bundle.digest[:19], size, extracted.files,
                 time.monotonic() - started)
        return InstallResult(bundle.digest, size, extracted, apps)

    def _download(self, bundle: BundleRef, archive: Path) -> int:
        limit = self.limits.max_download_bytes
        if bundle.size is not None and bundle.size > limit:
            raise BundleRefused(f"bundle declares {bundle.size} bytes, over the agent's limit of {limit}",
                                code="bundle_too_large")
        headers = self._auth_headers_for(bundle.url) if self._auth_headers_for else {}
        hasher = hashlib.sha256()
        received = 0
        last_progress = time.monotonic()
        try:
            with self._http.stream("GET", bundle.url, headers=headers) as response:
                if response.status_code != 200:
                    raise BundleRefused(f"bundle download answered HTTP {response.status_code}",
                                        code="bundle_download_failed")
                announced = response.headers.get("Content-Length")
                if announced and announced.isdigit() and int(announced) > limit:
                    raise BundleRefused(f"bundle is {announced} bytes, over the agent's limit of {limit}",
                                        code="bundle_too_large")
                fd = os.open(archive, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "wb") as out:
                    for chunk in response.iter_bytes(_CHUNK):
                        received += len(chunk)
                        if received > limit:
                            raise BundleRefused(f"bundle download passed the agent's limit of {limit} bytes",
                                                code="bundle_too_large")
                        hasher.update(chunk)
                        out.write(chunk)
                        if time.monotonic() - last_progress >= _PROGRESS_EVERY_S:
                            last_progress = time.monotonic()
                            log.info("bundle %s: %.1f MB downloaded", bundle.digest[:19], received / 1e6)
        except httpx.HTTPError as exc:
            raise BundleRefused(f"bundle download failed: {exc}", code="bundle_download_failed") from exc
        if bundle.size is not None and received != bundle.size:
            raise BundleRefused(f"bundle is {received} bytes, but Host declared {bundle.size}",
                                code="bundle_size_mismatch")
        actual = "sha256:" + hasher.hexdigest()
        if not hmac.compare_digest(actual, bundle.digest):
            raise BundleRefused(f"bundle digest is {actual}, expected {bundle.digest}", code="bundle_digest_mismatch")
        return received
