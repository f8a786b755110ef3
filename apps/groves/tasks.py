from celery import shared_task

from apps.groves import services


@shared_task(name="groves.mark_stale")
def mark_stale() -> int:
    return services.grove_stale_mark()
