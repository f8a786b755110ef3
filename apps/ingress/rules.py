"""Pure ingress rules: which host names of a live generation become routes, and which certificate
serves a host name. No Django."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DesiredRoute:
    hostname: str
    path_prefix: str
    workload_slug: str
    team: str
    environment: str
    grove_id: str
    upstream_address: str
    upstream_port: int


def generation_routes(*, spec_ingress: dict[str, Any] | None, claimed: Iterable[str], workload_slug: str, team: str,
                      environment: str, grove_id: str, mesh_address: str | None,
                      mesh_proxy_port: int | None) -> list[DesiredRoute]:
    """The routes of one live generation: the host names its agent serves (the generation's own ingress,
    which is what the agent rendered) that its workload still holds, sent to the Grove's mesh proxy.
    None without a reported mesh address and proxy port: the edge would have nowhere to send them."""
    if not spec_ingress or mesh_address is None or mesh_proxy_port is None:
        return []
    held = set(claimed)
    return [DesiredRoute(hostname=name, path_prefix=spec_ingress.get("path_prefix", "/"),
                         workload_slug=workload_slug, team=team, environment=environment, grove_id=grove_id,
                         upstream_address=mesh_address, upstream_port=mesh_proxy_port)
            for name in spec_ingress.get("hostnames", []) if name in held]


def certificate_paths(hostname: str, *, cert_template: str, key_template: str, wildcard_cert: str,
                      wildcard_key: str) -> tuple[str, str]:
    """(certificate, key) for ``hostname``: the wildcard pair when one is configured, else the per-name
    templates with ``{hostname}`` filled in."""
    if wildcard_cert and wildcard_key:
        return wildcard_cert, wildcard_key
    return cert_template.replace("{hostname}", hostname), key_template.replace("{hostname}", hostname)
