"""The mesh as a set of addresses the operator owns (docs/decisions.md "The mesh is the operator's"). Pure:
no Django. One parser and one policy serve the heartbeat (a Grove reports its address) and the edge
(which re-checks every upstream before it renders one, in case a bad one reached the database).

A mesh address is an IP literal in its one spelling: no host name, no zone id (``%eth0``), no IPv4-mapped
or IPv4-compatible IPv6 form (``::ffff:10.0.0.1`` would slip an IPv4 address past IPv6 ranges), no
unspecified, multicast or link-local address. It must be inside ``FOREST_MESH_NETWORKS`` and must not be
one of the edge's own or Host's own service addresses. The proxy port is inside the configured bounds.
"""
from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

MAX_ADDRESS = 45  # the longest IPv6 text form


@dataclass(frozen=True)
class MeshPolicy:
    networks: tuple[str, ...] = ()
    forbidden: frozenset[str] = field(default_factory=frozenset)  # the edge's and Host's own addresses
    port_min: int = 1024
    port_max: int = 65535


class MeshRefused(ValueError):
    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code, self.detail = code, detail


def parse_address(literal: object) -> str:
    """The address in its canonical text form, or ``MeshRefused`` (``mesh_address_invalid``)."""
    if not isinstance(literal, str) or not literal or len(literal) > MAX_ADDRESS:
        raise MeshRefused("mesh_address_invalid", "The mesh address is an IP literal (at most 45 characters).")
    shown = literal[:MAX_ADDRESS]
    if "%" in literal:
        raise MeshRefused("mesh_address_invalid", f"'{shown}' has a zone id; the mesh address is a plain IP literal.")
    try:
        address = ipaddress.ip_address(literal)
    except ValueError:
        raise MeshRefused("mesh_address_invalid", f"'{shown}' is not an IP address; the mesh address is an "
                          "IP literal, never a host name.") from None
    if isinstance(address, ipaddress.IPv6Address) and (
            address.ipv4_mapped is not None or address.sixtofour is not None or address.teredo is not None
            or (int(address) >> 32 == 0 and int(address) > 1)):
        raise MeshRefused("mesh_address_invalid", f"'{shown}' embeds an IPv4 address; report the IPv4 address "
                          "itself.")
    if address.is_unspecified or address.is_multicast or address.is_link_local:
        raise MeshRefused("mesh_address_invalid", f"{address} is not a unicast address a proxy can listen on.")
    return str(address)


def check_address(literal: object, policy: MeshPolicy) -> str:
    """``parse_address``, then inside the mesh networks and none of the edge's or Host's own addresses."""
    text = parse_address(literal)
    address = ipaddress.ip_address(text)
    if not any(address in ipaddress.ip_network(network, strict=False) for network in policy.networks):
        raise MeshRefused("mesh_address_outside_range", f"{address} is outside the mesh networks this Host "
                          f"accepts ({', '.join(policy.networks) or 'none configured: FOREST_MESH_NETWORKS'}).")
    if text in policy.forbidden:
        raise MeshRefused("mesh_address_reserved", f"{address} is an address of Host's edge or of one of Host's "
                          "own services; a Grove's proxy never has it.")
    return text


def check_port(port: object, policy: MeshPolicy) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not policy.port_min <= port <= policy.port_max:
        raise MeshRefused("mesh_port_out_of_range", f"The proxy port is an integer from {policy.port_min} to "
                          f"{policy.port_max} (FOREST_MESH_PROXY_PORTS).")
    return port


def upstream_refusal(address: object, port: object, policy: MeshPolicy) -> MeshRefused | None:
    """Why the edge must not send traffic to ``address:port`` (None: it may)."""
    try:
        check_address(address, policy)
        check_port(port, policy)
    except MeshRefused as refused:
        return refused
    return None


def own_addresses(*, edge_bind: str, listens: Iterable[str], service_urls: Iterable[str]) -> frozenset[str]:
    """The IP literals among the edge's proxy bind, its listen addresses and Host's service URLs (names are
    left out: resolving them would make a heartbeat wait on DNS; an operator lists their addresses in
    ``FOREST_MESH_RESERVED``)."""
    candidates = [edge_bind, *listens]
    for url in service_urls:
        try:
            candidates.append(urlsplit(url).hostname or "")
        except ValueError:
            continue
    found = set()
    for candidate in candidates:
        text = (candidate or "").strip()
        if text.startswith("[") and "]" in text:
            text = text[1:text.index("]")]
        elif text.count(":") == 1:
            text = text.partition(":")[0]
        try:
            found.add(str(ipaddress.ip_address(text)))
        except ValueError:
            continue
    return frozenset(found)
