"""Compute jobs: a pipeline-run kind, not a second scheduler (docs/design.md §1, design note).

Owns the compute request format, its translation into a Canopy Pipeline Graph of exec nodes
(``reuse: never``, family ``compute``, one step after another), the Grove pin, and the compute API behind
``host.deploy.forest_compute_jobs``. Placement, dispatch, waiting and cancellation are apps.pipelines'.
"""
