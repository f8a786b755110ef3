"""Bundle install: Ed25519 signature over the claimed `sha256:<hex>` first, then one streaming
pass that downloads (size-limited), hashes and safely extracts at the same time; the computed
digest must equal the signed one or everything extracted is deleted.

Why stream: a download that is hashed, then re-read and extracted, costs one full extra pass and
a copy of the archive on disk. Checking the signature first means an unsigned bundle is refused
before a byte is fetched; the remaining risk, tar parsing of bytes whose digest is not yet
confirmed, is contained by the extractor (every write confined to this generation's directory,
bounded size and count) and ends in deletion on mismatch, as container runtimes do for layers.

Each refusal is a `BundleRefused` with a stable code: `bundle_download_failed`, `bundle_too_large`,
`bundle_size_mismatch`, `bundle_digest_mismatch`, `bundle_key_unknown`, `bundle_signature_invalid`,
`bundle_unreadable`, `bundle_path_escape`, `bundle_too_many_files`, `bundle_special_file`,
`bundle_codesign_invalid`, `bundle_codesign_unavailable`.
"""

from __future__ import annotations

import hmac
import logging
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from forest_agent.download import Download
from forest_agent.errors import BundleRefused
from forest_agent.native.codesign import verify_apps
from forest_agent.native.extract import ExtractLimits, ExtractResult, extract_tar
from forest_agent.native.signing import TrustedKeys
from forest_agent.oskit import CommandRunner
from forest_agent.wire.messages import BundleRef

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class BundleLimits:
    max_download_bytes: int = 1024**3
    extract: ExtractLimits = field(default_factory=ExtractLimits)


@dataclass(frozen=True)
class InstallResult:
    digest: str
    downloaded_bytes: int
    extracted: ExtractResult
    apps_verified: list[str]


class BundleInstaller:
    def __init__(
        self,
        *,
        keys: TrustedKeys,
        limits: BundleLimits,
        http: httpx.Client | None = None,
        auth_headers_for: Callable[[str], dict[str, str]] | None = None,
        runner: CommandRunner | None = None,
        platform: str = sys.platform,
    ) -> None:
        self.keys = keys
        self.limits = limits
        self._http = http or httpx.Client(timeout=httpx.Timeout(30.0, read=60.0), follow_redirects=False)
        self._auth_headers_for = auth_headers_for
        self._runner = runner or CommandRunner()
        self._platform = platform

    def install(self, bundle: BundleRef, dest: Path) -> InstallResult:
        """Verify and extract `bundle` into `dest/app`; on any refusal `dest/app` is removed."""
        limit = self.limits.max_download_bytes
        if bundle.size is not None and bundle.size > limit:
            raise BundleRefused(
                f"bundle declares {bundle.size} bytes, over the agent's limit of {limit}",
                code="bundle_too_large",
            )
        # The signature covers the digest Host claims; refuse an unsigned bundle before fetching it.
        self.keys.verify(key_id=bundle.key_id, digest=bundle.digest, signature_b64=bundle.signature)
        started = time.monotonic()
        app = dest / "app"
        app.mkdir(mode=0o755)
        headers = self._auth_headers_for(bundle.url) if self._auth_headers_for else {}
        download = Download(self._http, bundle, headers, limit)
        download.start()
        try:
            extracted, extract_error = None, None
            try:
                extracted = extract_tar(download, app, self.limits.extract)
            except BundleRefused as exc:
                extract_error = exc
            download.drain()
            # Most fundamental first: a failed download, then a wrong digest, then the archive itself.
            if download.error is not None:
                raise download.error
            actual = "sha256:" + download.hasher.hexdigest()
            if not hmac.compare_digest(actual, bundle.digest):
                raise BundleRefused(
                    f"bundle digest is {actual}, expected {bundle.digest}", code="bundle_digest_mismatch"
                )
            if extract_error is not None:
                raise extract_error
            assert extracted is not None
            apps = verify_apps(app, self._runner) if self._platform == "darwin" else []
        except BaseException:
            download.abandon()
            shutil.rmtree(app, ignore_errors=True)
            raise
        log.info(
            "bundle %s installed: %d bytes, %d entries, %.2fs",
            bundle.digest[:19],
            download.received,
            extracted.files,
            time.monotonic() - started,
        )
        return InstallResult(bundle.digest, download.received, extracted, apps)
