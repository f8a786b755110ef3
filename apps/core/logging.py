"""structlog wired into the standard library, so Django's, Celery's and our own lines share one format."""
from __future__ import annotations

import logging

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
