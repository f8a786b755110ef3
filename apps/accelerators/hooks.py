"""What apps above accelerators do when a claim is made or ends, registered at start-up (their ``wiring``).

Accelerators never import placement. Placement keeps Host's active claims in its fleet snapshot, so a claim
made (``accelerator_claim``) or ended (``claim_transition``) is news for it: every ``on_claims_changed``
handler is called with the claim's Grove id, inside the transaction that changed the claim. Usage accrual
does not change a claim's counts and calls nothing.
"""
from __future__ import annotations

from collections.abc import Callable

ClaimsChangedHandler = Callable[[object], None]  # (grove_id) -> None
_claims_changed: list[ClaimsChangedHandler] = []


def on_claims_changed(handler: ClaimsChangedHandler) -> None:
    if handler not in _claims_changed:
        _claims_changed.append(handler)


def claims_changed(grove_id) -> None:
    for handler in _claims_changed:
        handler(grove_id)


def subscribers() -> dict[str, list[Callable]]:
    return {"claims_changed": list(_claims_changed)}
