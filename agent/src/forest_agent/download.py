"""A blob fetched in a thread: streamed, size-bounded, hashed as it arrives, and read as a file.

Shared by the native agent's bundle install (``native.bundles``) and the step data delivery
(``forest_agent.data``) that both executors use, so it sits below both. `what` names the blob in codes and
log lines (``bundle_too_large``; a step's input: ``input_too_large``).
"""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
import time
from typing import Any

import httpx

from forest_agent.errors import BundleRefused

log = logging.getLogger(__name__)

CHUNK = 1 << 20
_QUEUE_CHUNKS = 16  # at most ~16 MiB in flight between download and extraction
_PROGRESS_EVERY_S = 2.0
_EOF = object()



class Download(threading.Thread):
    """Fetches a blob in a thread, hashing each chunk, and hands chunks to a file-like reader. `what`
    names it in codes and log lines (`bundle_too_large`; a step's input: `input_too_large`)."""

    def __init__(
        self, http: httpx.Client, bundle: Any, headers: dict[str, str], limit: int, *, what: str = "bundle"
    ) -> None:
        super().__init__(name=f"{what}-download", daemon=True)
        self.what = what
        self.http = http
        self.bundle = bundle
        self.headers = headers
        self.limit = limit
        self.hasher = hashlib.sha256()
        self.received = 0
        self.error: BundleRefused | None = None
        self._chunks: queue.Queue[object] = queue.Queue(maxsize=_QUEUE_CHUNKS)
        self._buffer = memoryview(b"")
        self._abandoned = threading.Event()

    def run(self) -> None:
        try:
            self._fetch()
        except BundleRefused as exc:
            self.error = exc
        except httpx.HTTPError as exc:
            self.error = BundleRefused(
                f"{self.what} download failed: {exc}", code=f"{self.what}_download_failed"
            )
        finally:
            self._put(_EOF)

    def _put(self, item: object) -> bool:
        while not self._abandoned.is_set():
            try:
                self._chunks.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _fetch(self) -> None:
        limit, last_progress = self.limit, time.monotonic()
        with self.http.stream("GET", self.bundle.url, headers=self.headers) as response:
            what = self.what
            if response.status_code != 200:
                raise BundleRefused(
                    f"{what} download answered HTTP {response.status_code}", code=f"{what}_download_failed"
                )
            announced = response.headers.get("Content-Length")
            if announced and announced.isdigit() and int(announced) > limit:
                raise BundleRefused(
                    f"{what} is {announced} bytes, over the agent's limit of {limit}",
                    code=f"{what}_too_large",
                )
            for chunk in response.iter_bytes(CHUNK):
                self.received += len(chunk)
                if self.received > limit:
                    raise BundleRefused(
                        f"{what} download passed the agent's limit of {limit} bytes", code=f"{what}_too_large"
                    )
                self.hasher.update(chunk)
                if not self._put(chunk):
                    return
                if time.monotonic() - last_progress >= _PROGRESS_EVERY_S:
                    last_progress = time.monotonic()
                    log.info("%s %s: %.1f MB downloaded", what, self.bundle.digest[:19], self.received / 1e6)
        if self.bundle.size is not None and self.received != self.bundle.size:
            raise BundleRefused(
                f"{what} is {self.received} bytes, but Host declared {self.bundle.size}",
                code=f"{what}_size_mismatch",
            )

    # -- file-like side, used by the extractor ---------------------------------------------------
    def read(self, size: int = -1) -> bytes:
        while not self._buffer:
            item = self._chunks.get()
            if item is _EOF:
                self._put(_EOF)  # keep answering EOF
                if self.error is not None:
                    raise self.error
                return b""
            self._buffer = memoryview(item)  # type: ignore[arg-type]
        take = len(self._buffer) if size is None or size < 0 else min(size, len(self._buffer))
        data, self._buffer = self._buffer[:take].tobytes(), self._buffer[take:]
        return data

    def drain(self) -> None:
        """Read whatever the extractor left (tar padding, or all of it after a refusal) for the digest."""
        try:
            while self.read(CHUNK):
                pass
        except BundleRefused:
            pass
        self.join()

    def abandon(self) -> None:
        self._abandoned.set()
        self.join(5.0)
