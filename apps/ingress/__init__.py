"""Native ingress, Host side: the routes from public host names to native workloads (derived from the
workloads' live generations on fresh Groves that report a mesh address), the edge that renders them into
one nginx configuration (``manage.py forest_edge``: TLS here, plain HTTP over the mesh to the agent's
proxy), and what the edge reports back (serving, pending, failed with nginx's error)."""
