"""The agent's hop of native ingress: one nginx server block per workload on the mesh proxy listener
(plain HTTP from the mesh range and the edge only, by host name) -> the workload's local port, and a
default server answering 421 for any other host. Rendering and the test/reload/restore cycle are the
shared `forest_agent.nginx`, which Host's public edge uses too; public TLS stays at Host's nginx.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from forest_agent.errors import IngressRefused
from forest_agent.nginx import (
    MeshHop,
    NginxCommand,
    NginxConfigFiles,
    render_mesh_default,
    render_mesh_server,
    validate_listen,
)
from forest_agent.oskit import CommandRunner
from forest_agent.wire.messages import Ingress

__all__ = ["MeshHop", "NginxCommand", "NginxProxyManager", "render_server_block", "validate_listen"]

log = logging.getLogger(__name__)

_WORKLOAD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
DEFAULT_FILE = "forest-00-mesh-default.conf"


def render_server_block(workload: str, ingress: Ingress, hop: MeshHop) -> str:
    if not _WORKLOAD.match(workload):
        raise IngressRefused(f"workload name {workload!r} cannot name an nginx config file")
    return render_mesh_server(workload, ingress.hostnames, ingress.path_prefix, ingress.port, hop)


class NginxProxyManager:
    def __init__(self, conf_dir: Path, command: NginxCommand, runner: CommandRunner | None = None,
                 hop: MeshHop | None = None) -> None:
        self.conf_dir = conf_dir
        self.command = command
        self.hop = hop
        self.files = NginxConfigFiles(conf_dir, command, runner)

    def path_for(self, workload: str) -> Path:
        return self.conf_dir / f"forest-{workload}.conf"

    def ensure_default(self) -> None:
        """The mesh listener's catch-all (421 for an unknown host); installed once the hop is known."""
        if self.hop is not None:
            self.files.install(self.conf_dir / DEFAULT_FILE, render_mesh_default(self.hop), "mesh default")

    def apply(self, workload: str, ingress: Ingress) -> Path:
        """Install or replace the workload's server block; on any failure the old file is back."""
        if self.hop is None:
            raise IngressRefused("this agent has no mesh proxy (--proxy-port with --mesh-address or "
                                 "--mesh-interface); the workload runs without ingress",
                                 code="ingress_unavailable")
        text = render_server_block(workload, ingress, self.hop)
        path = self.path_for(workload)
        if not (self.conf_dir / DEFAULT_FILE).exists():
            self.ensure_default()
        if self.files.install(path, text, workload):
            log.info("ingress for %s: %s (%s%s) -> 127.0.0.1:%d", workload, self.hop.listen,
                     " ".join(ingress.hostnames), ingress.path_prefix, ingress.port)
        return path

    def remove(self, workload: str) -> None:
        path = self.path_for(workload)
        if path.exists():
            self.files.install(path, None, workload)
