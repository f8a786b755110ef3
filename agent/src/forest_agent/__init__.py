"""forest-agent: the Grove-side executor for native machines (docs/design.md §1, §4).

It talks to Host only through the wire API (`forest_agent.wire`), reports what the machine can run
(`forest_agent.inventory`) and runs native jobs and workloads (`forest_agent.native`).
"""

__version__ = "0.1.0"
