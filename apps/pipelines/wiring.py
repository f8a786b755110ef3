"""Everything pipelines subscribes to in the apps below it, in one place (called by ``PipelinesConfig.ready``).
docs/architecture.md "Events and subscribers" lists the same; tests/core/test_wiring.py holds the two equal."""
from __future__ import annotations


def connect() -> None:
    from apps.artifacts import hooks as artifact_hooks
    from apps.dispatch import hooks as dispatch_hooks
    from apps.groves import hooks as grove_hooks
    from apps.pipelines import artifact_scope
    from apps.pipelines.services import admission_queue, resume, transitions
    from apps.pipelines.states import NODE

    # A job's end, in its transaction: the node's resume (tail inline or the outbox row), then the queue's
    # wake-up for the unit it freed.
    dispatch_hooks.on_job_ended(resume.on_job_ended)
    dispatch_hooks.on_job_ended(admission_queue.wake_on_job_ended)
    # A heartbeat moved a Grove's free counts (after its commit, or on the lean route outside Django).
    grove_hooks.on_capacity_moved(admission_queue.wake_any_waiting)
    NODE.listen(transitions.record_node_event)
    artifact_hooks.register_grove_reader(artifact_scope.grove_reads_input)
    artifact_hooks.register_grove_writer(artifact_scope.grove_writes_output)
    artifact_hooks.register_referencer(artifact_scope.inputs_referenced)
    artifact_hooks.register_job_check(artifact_scope.grove_job_live)
