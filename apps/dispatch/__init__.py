"""Dispatch: the Grove job and the wire. Owns ``GroveJob`` and its lifecycle, the Grove-facing endpoints
(enroll, heartbeat, the ``changes`` long-poll, claim, report), cancellation delivery and per-Grove
wake-ups. Every executor (the native ``forest-agent``, ``forest-controller``) speaks to Host here.

Pipelines, workloads and accelerators depend on dispatch; dispatch depends on none of them. What an upper
app must do in the transaction that ends a job (the pipeline resume outbox row, the accelerator release)
it registers with ``apps.dispatch.hooks``; workload generations reach ``changes`` the same way.
"""
