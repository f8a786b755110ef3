"""What accelerators subscribes to below it (called by ``AcceleratorsConfig.ready``; listed in
docs/architecture.md)."""
from __future__ import annotations


def connect() -> None:
    from apps.accelerators import services
    from apps.dispatch import hooks as dispatch_hooks

    dispatch_hooks.on_job_ended(services.release_on_job_end)
