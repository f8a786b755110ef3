"""What the accounts commands share: who is acting, and ForestError → CommandError."""
from __future__ import annotations

import getpass
from contextlib import contextmanager

from django.core.management.base import CommandError

from apps.core.errors import ForestError


def os_actor(command: str) -> str:
    try:
        who = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry in some containers
        who = "unknown"
    return f"manage.py {command} ({who})"


@contextmanager
def refusals_as_errors():
    try:
        yield
    except ForestError as exc:
        raise CommandError(f"{exc.code}: {exc.detail}") from None
