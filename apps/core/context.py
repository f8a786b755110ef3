"""Per-request facts that code far from the view needs (the audit trail's request id). Set by
``apps.core.middleware``; empty outside a request (Celery tasks, management commands)."""
from __future__ import annotations

from contextvars import ContextVar

request_id: ContextVar[str] = ContextVar("forest_request_id", default="")
