"""Celery tasks for pipelines: thin, take ids, call services. All are safe to run twice."""
from celery import shared_task

from apps.flags.selectors import pinned_snapshot
from apps.pipelines import services
from apps.pipelines.vocabulary import WaitMode


@shared_task(name="pipelines.node_execute")
def node_execute(node_id: int) -> str | None:
    """Dispatch a queued node; an in-place step then holds this worker until its job ends."""
    with pinned_snapshot():
        mode = services.pipeline_node_execute(node_id=node_id)
    if mode == WaitMode.IN_PLACE:
        services.pipeline_node_wait_in_place(node_id=node_id)
    return mode


@shared_task(name="pipeline.node_resume")
def node_resume(node_id: int) -> bool:
    return services.pipeline_node_resume(node_id=node_id)


@shared_task(name="pipelines.sweep")
def sweep() -> dict:
    return services.pipeline_sweep()
