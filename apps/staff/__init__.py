"""Staff observability pages (HTMX): Grove inventory and placements, behind
``host.staff.execution_observability``. Reads only; each page is a thin declaration over a selector and
the same filterset the API uses."""
