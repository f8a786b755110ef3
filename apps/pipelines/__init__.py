"""Pipelines: Canopy Pipeline Graphs, runs and per-run nodes.

Owns graph validation/canonicalisation and ``graph_digest`` (identity of the *work*), each node's
execution requirement, the planner, one ``PipelineNode`` row per run per node (identity of the
*attempt*), the explicit GRAPH_DEDUP seed-time decision, the exec driver that places each node through
``apps.placement`` and creates its Grove job through ``apps.dispatch``, detached and in-place waiting,
the ``pipeline.node_resume`` transactional outbox (written by a ``dispatch.hooks`` handler when a job
ends) and its recurring sweep, and cancellation.
"""
