"""structlog wired into the standard library, so Django's, Celery's and our own lines share one format."""
from __future__ import annotations

import logging
import re
from typing import Any

import structlog

_SHARED = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
]


def structured_formatter(console: bool = False) -> logging.Formatter:
    """A formatter for ``LOGGING``; also configures structlog once so ``get_logger`` feeds it."""
    structlog.configure(
        processors=[*_SHARED, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    renderer = structlog.dev.ConsoleRenderer(colors=False) if console else structlog.processors.JSONRenderer()
    # ExtraAdder keeps the fields of ``log.info("...", extra={...})`` from standard-library loggers.
    return structlog.stdlib.ProcessorFormatter(
        processor=renderer, foreign_pre_chain=[*_SHARED, structlog.stdlib.ExtraAdder()])


# An API URL's query string in a logged request line: API routes take their secrets in headers, and a
# client that put one in the URL instead (``?token=...``) must not have it written to the log.
_API_QUERY = re.compile(r"(/api/[^\s?\"]*)\?[^\s\"]*")
REDACTED = "?[query redacted]"


class ApiQueryRedactingFilter(logging.Filter):
    """On the access loggers (``django.server``, ``uvicorn.access``): every ``/api/`` request line is logged
    without its query string, whatever the server formats (the message or its arguments)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = _API_QUERY.sub(rf"\1{REDACTED}", record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_API_QUERY.sub(rf"\1{REDACTED}", arg) if isinstance(arg, str) else arg
                                for arg in record.args)
        request: Any = getattr(record, "request", None)
        if hasattr(request, "path") and hasattr(request, "method"):
            # django.request attaches the HttpRequest, whose repr is the full URL: keep its path alone.
            record.request = f"{request.method} {request.path}"
        return True
