"""The ``forest`` command line: compute jobs, pipeline runs and placement explanations over the REST API,
and ``forest mcp``, the same operations as MCP tools over stdio. Configure with ``--host``/``FOREST_HOST``
and ``--token``/``FOREST_TOKEN`` (an API token: ``manage.py api_token create USER --name CLIENT``)."""
