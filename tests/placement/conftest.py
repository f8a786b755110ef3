"""Groves for placement tests, made through the real Grove services (create + heartbeat)."""
from __future__ import annotations

import pytest

from apps.groves import services as grove_services
from tests.factories import unit

DEFAULT_KINDS = {"native": ["native.job", "native.workload"], "kubernetes": ["k8s.job", "k8s.build_job",
                                                                          "k8s.deployment"]}


def grove_make(name: str, *, substrate: str = "kubernetes", roles=("build",), platforms=("linux/amd64",),
               change_kinds=None, isolation=None, units=None, accelerators=None, heartbeat: bool = True,
               polled: bool = True):
    """``heartbeat``: live (else stale); ``polled``: it polled for work too, so ready (else live, not ready)."""
    grove = grove_services.grove_create(name=name, slug=name, substrate=substrate, roles=list(roles),
                                        platforms=list(platforms))
    if not heartbeat:
        return grove
    body = {
        "version": "test",
        "change_kinds": list(DEFAULT_KINDS[substrate] if change_kinds is None else change_kinds),
        "isolation": list(isolation if isolation is not None else
                          (["host_process"] if substrate == "native" else ["container"])),
        "capacity": {"placement_units": units if units is not None else [unit()],
                     "accelerators": accelerators or []},
    }
    grove = grove_services.grove_heartbeat_record(grove=grove, body=body)
    if polled:
        grove_services.grove_poll_record(grove=grove)
    return grove


@pytest.fixture
def make_grove(db):
    return grove_make
