"""The agent log ring: the last N log lines, secrets redacted, sent to Host with each heartbeat.

Redaction happens before a line is stored or printed anywhere, so a secret value that a workload
echoes, or that slips into an error message, never leaves the machine. Values are registered by the
workload manager (secrets) and the CLI (the Grove credential, the enrollment token).
"""

from __future__ import annotations

import logging
import re
import threading
from collections import deque
from collections.abc import Iterable

REDACTED = "[redacted]"
# Bearer headers can appear in httpx debug output or exception text; never keep the token part.
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+")
# Values shorter than this would redact ordinary words ("1", "on") and make logs unreadable.
_MIN_SECRET_LENGTH = 4


class Redactor:
    """Replaces every registered secret value (and bearer tokens) with `[redacted]`."""

    def __init__(self) -> None:
        self._values: set[str] = set()
        self._lock = threading.Lock()
        self._pattern: re.Pattern[str] | None = None

    def add(self, values: Iterable[str]) -> None:
        with self._lock:
            changed = False
            for value in values:
                if isinstance(value, str) and len(value) >= _MIN_SECRET_LENGTH and value not in self._values:
                    self._values.add(value)
                    changed = True
            if changed:
                # Longest first so a secret that contains another is redacted whole.
                ordered = sorted(self._values, key=len, reverse=True)
                self._pattern = re.compile("|".join(re.escape(v) for v in ordered))

    def redact(self, text: str) -> str:
        text = _BEARER.sub(r"\1" + REDACTED, text)
        pattern = self._pattern
        return pattern.sub(REDACTED, text) if pattern is not None else text


class LogRing:
    """A bounded, thread-safe ring of already-redacted lines."""

    def __init__(self, capacity: int, redactor: Redactor) -> None:
        self._lines: deque[str] = deque(maxlen=capacity)
        self._lock = threading.Lock()
        self.redactor = redactor

    def append(self, line: str) -> None:
        clean = self.redactor.redact(line.rstrip("\n"))
        with self._lock:
            self._lines.append(clean)

    def tail(self, count: int | None = None) -> list[str]:
        with self._lock:
            lines = list(self._lines)
        return lines if count is None else lines[-count:]


class RedactingFilter(logging.Filter):
    """Renders each record once and redacts it, so every handler (stderr, ring) sees clean text."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = self.redactor.redact(record.getMessage())
        record.args = None
        if record.exc_info:
            # Exception text can quote secrets too; fold it into the message and drop the raw info.
            record.msg += "\n" + self.redactor.redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
            record.exc_text = None
        return True


class RingHandler(logging.Handler):
    def __init__(self, ring: LogRing) -> None:
        super().__init__()
        self.ring = ring

    def emit(self, record: logging.LogRecord) -> None:
        self.ring.append(self.format(record))


def install_logging(ring: LogRing, *, verbose: bool = False) -> None:
    """Route the `forest_agent` logger to stderr and the ring, both through the redactor."""
    logger = logging.getLogger("forest_agent")
    logger.setLevel(logging.DEBUG if verbose else logging.INFO)
    logger.propagate = False
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in (logging.StreamHandler(), RingHandler(ring)):
        handler.setFormatter(fmt)
        handler.addFilter(RedactingFilter(ring.redactor))
        logger.addHandler(handler)
