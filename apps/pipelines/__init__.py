"""Pipelines: Canopy Pipeline Graphs, runs, per-run nodes, Grove jobs, and the wire endpoints Groves use for jobs.

Owns graph validation/canonicalisation and ``graph_digest`` (identity of the *work*), the planner, one
``PipelineNode`` row per run per node (identity of the *attempt*), the explicit GRAPH_DEDUP seed-time
decision, ``GroveJob`` (``build_id`` nullable: compute runs have none), the exec driver that places
each node through ``apps.placement`` and creates its job on the placed Grove, detached and in-place
waiting, the ``pipeline.node_resume`` transactional outbox and its recurring sweep, cancellation, and
the Grove wire endpoints ``changes`` (async long-poll), ``claim`` and ``report``.
"""
