"""Celery tasks for pipelines: thin, take ids, call services. All are safe to run twice."""
from celery import shared_task

from apps.flags.selectors import pinned_snapshot
from apps.pipelines import services
from apps.pipelines.vocabulary import Task, WaitMode


@shared_task(name=Task.NODE_EXECUTE.value)
def node_execute(node_id: int) -> str | None:
    """Dispatch a queued node; an in-place step's wait is handed to a runner slot, so this worker is free
    for the next dispatch or resume at once."""
    with pinned_snapshot():
        mode = services.pipeline_node_execute(node_id=node_id)
    if mode == WaitMode.IN_PLACE:
        services.send_to_runner(node_id)
    return mode


@shared_task(name=Task.NODE_WAIT_IN_PLACE.value)
def node_wait_in_place(node_id: int) -> bool:
    """Runs on the runner pool (PIPELINE_RUNNER_QUEUE): holds one runner slot while the job runs."""
    return services.pipeline_node_wait_in_place(node_id=node_id)


@shared_task(name=Task.NODE_RESUME.value)
def node_resume(node_id: int) -> bool:
    return services.pipeline_node_resume(node_id=node_id)


@shared_task(name=Task.ADMISSION_WAKE.value)
def admission_wake(grove_id: str) -> list[int]:
    """Capacity freed on a Grove: admit what waits for it, in submission order."""
    return services.admission_wake(grove_id=grove_id)


@shared_task(name=Task.NODE_WAIT_EXPIRE.value)
def node_wait_expire(node_id: int) -> bool:
    return services.node_wait_expire(node_id=node_id)


@shared_task(name=Task.SWEEP.value)
def sweep() -> dict:
    return services.pipeline_sweep()
