"""Staff observability, at the top of the import order (it reads every app; nothing imports it).

Owns the HTMX pages (Groves, accelerators, placements, runs with cancel, the "would have refused"
report, the capability status page), the staff read API and the ``plan`` preview, Forest's Prometheus
metrics on ``/metrics``, the capability status registry that the README's table is generated from, and
the indexes its read paths need. Pages and the staff API sit behind ``host.staff.execution_observability``
and ``apps.core.permissions.is_staff_user``. Each list is a thin declaration: a selector, the filterset
the API uses, a django-tables2 table.
"""
