from celery import shared_task

from apps.accelerators import services


@shared_task(name="accelerators.accrue_usage")
def accrue_usage() -> dict:
    """Beat: accrue running claims into the usage ledger and enforce budgets (idempotent)."""
    result = services.accelerator_usage_accrue()
    return {"accrued_ms": result["accrued_ms"], "revoked": len(result["revoked"])}
