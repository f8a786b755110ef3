from celery import shared_task

from apps.staff import services


@shared_task(name="staff.refusal_rollup")
def refusal_rollup() -> int:
    """Bring the daily refusal rollup up to now; the number of rollup rows rewritten."""
    return services.refusal_rollup_update().rows
