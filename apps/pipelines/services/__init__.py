"""Writes for pipelines, one module per job: ``runs`` (create, advance, cancel), ``planning`` (order,
requirements, GRAPH_DEDUP), ``dispatching`` (place a node and create its Grove job; wait in place),
``resume`` (the outbox row at a job's end and the node's tail), ``admission_queue`` (waiting for
capacity: enter, wake, admit, expire), ``sweep`` (recovery), with
``transitions`` (the node/run state changes) and ``outbox`` (sending after commit) under them.

The package's public names are re-exported here for callers (tasks, APIs, compute).
"""
from apps.pipelines.services.admission_queue import admission_wake, node_wait_expire
from apps.pipelines.services.dispatching import pipeline_node_execute, pipeline_node_wait_in_place
from apps.pipelines.services.outbox import send_to_runner
from apps.pipelines.services.planning import PlannedNode, pipeline_plan
from apps.pipelines.services.resume import on_job_ended, pipeline_node_resume
from apps.pipelines.services.runs import pipeline_run_cancel, pipeline_run_cancel_as, pipeline_run_create, run_advance
from apps.pipelines.services.sweep import pipeline_sweep
from apps.pipelines.services.transitions import node_transition, run_transition

__all__ = [
    "PlannedNode", "admission_wake", "node_transition", "node_wait_expire", "on_job_ended",
    "pipeline_node_execute", "pipeline_node_resume", "pipeline_node_wait_in_place", "pipeline_plan",
    "pipeline_run_cancel", "pipeline_run_cancel_as", "pipeline_run_create", "pipeline_sweep", "run_advance",
    "run_transition",
    "send_to_runner",
]
