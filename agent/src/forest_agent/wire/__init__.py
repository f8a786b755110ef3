"""The Grove side of Host's wire API (docs/wire.md): a typed HTTP client and the message shapes.

Shared by the native agent and, later, the Kubernetes controller; nothing here knows how work runs.
"""

from forest_agent.wire.client import WireClient, WireError, api_base_url
from forest_agent.wire.messages import Generation, Job, Probe, parse_changes

__all__ = ["Generation", "Job", "Probe", "WireClient", "WireError", "api_base_url", "parse_changes"]
