"""The native Grove's mesh address: where Host's edge reaches this machine's ingress proxy.

Taken from configuration (`--mesh-address`), or read from a named interface (`--mesh-interface wg0`, the
WireGuard interface) with psutil, which reads interface addresses on Linux and macOS alike.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

import psutil

from forest_agent.errors import ConfigError


@dataclass(frozen=True)
class MeshAddress:
    address: str
    network: str | None  # the interface's network, when read from one


def resolve(*, address: str | None, interface: str | None) -> MeshAddress | None:
    if address and interface:
        raise ConfigError("give --mesh-address or --mesh-interface, not both")
    if address:
        try:
            return MeshAddress(str(ipaddress.ip_address(address)), None)
        except ValueError:
            raise ConfigError(f"--mesh-address {address!r} is not an IP address") from None
    if not interface:
        return None
    found = psutil.net_if_addrs().get(interface)
    if found is None:
        raise ConfigError(f"--mesh-interface {interface!r}: no such interface")
    for family in (socket.AF_INET, socket.AF_INET6):
        for item in found:
            if item.family == family and item.address:
                literal = item.address.split("%", 1)[0]
                network = None
                if item.netmask:
                    network = str(ipaddress.ip_interface(f"{literal}/{item.netmask}").network)
                return MeshAddress(literal, network)
    raise ConfigError(f"--mesh-interface {interface!r} has no IP address")
