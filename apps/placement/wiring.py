"""What placement subscribes to below it (called by ``PlacementConfig.ready``; listed in docs/architecture.md)."""
from __future__ import annotations


def connect() -> None:
    from apps.accelerators import hooks as accelerator_hooks
    from apps.placement import snapshot

    # Host's accelerator claims live in the fleet snapshot: a claim made or ended is news for it.
    accelerator_hooks.on_claims_changed(snapshot.claims_changed)
