"""The mesh address the agent reports: from configuration, or read from a named interface (here the
loopback interface, which every machine has, standing in for the WireGuard one)."""

from __future__ import annotations

import psutil
import pytest

from forest_agent import mesh
from forest_agent.errors import ConfigError


def test_a_configured_address_is_normalised() -> None:
    assert mesh.resolve(address="fd00::0005", interface=None) == mesh.MeshAddress("fd00::5", None)
    assert mesh.resolve(address=None, interface=None) is None


def test_an_address_is_read_from_a_named_interface() -> None:
    loopback = next(name for name, addresses in psutil.net_if_addrs().items()
                    if any(a.address == "127.0.0.1" for a in addresses))
    found = mesh.resolve(address=None, interface=loopback)
    assert found == mesh.MeshAddress("127.0.0.1", "127.0.0.0/8")


@pytest.mark.parametrize(("address", "interface", "needle"), [
    ("mesh.example", None, "is not an IP address"),
    (None, "forest-no-such-if0", "no such interface"),
    ("10.8.0.5", "wg0", "not both"),
])
def test_bad_mesh_settings_are_refused(address, interface, needle) -> None:
    with pytest.raises(ConfigError) as caught:
        mesh.resolve(address=address, interface=interface)
    assert needle in caught.value.message
