"""Accelerator admission (pure) and the policy arithmetic: table-driven."""
from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from apps.accelerators import rules
from apps.placement.requirements import AcceleratorRequest, parse_accelerators

GIB = 1 << 30
H100 = rules.Device("GPU-0", "nvidia", ("cuda",), 80 * GIB, "dedicated", True, "exclusive")
H100B = rules.Device("GPU-1", "nvidia", ("cuda",), 80 * GIB, "dedicated", True, "exclusive")
T4 = rules.Device("GPU-2", "nvidia", ("cuda",), 16 * GIB, "dedicated", True, "exclusive")
MI = rules.Device("GPU-3", "amd", ("rocm",), 64 * GIB, "dedicated", True, "exclusive")
VULKAN_ONLY = rules.Device("GPU-4", "nvidia", ("vulkan",), 24 * GIB, "dedicated", True, "exclusive")
APPLE = rules.Device("apple-gpu-0", "apple", ("metal",), 48 * GIB, "unified", False, "cooperative")
NO_MEMORY = rules.Device("GPU-5", "nvidia", ("cuda",), None, "dedicated", True, "exclusive")


def unit(unit_id, *slots):
    return rules.Unit(unit_id, tuple(rules.Slot(device.inventory_id, allocatable, free)
                                     for device, allocatable, free in slots))


def request(**kwargs) -> AcceleratorRequest:
    return parse_accelerators({"count": 1, **kwargs})


@pytest.mark.parametrize(("name", "req", "units", "devices", "claimed", "admitted", "codes", "allocations"), [
    ("one free H100", request(vendor="nvidia"), [unit("n1", (H100, 1, 1))], [H100], {}, True, [],
     (("GPU-0", 1),)),
    ("device exists but exposes the wrong API (design note)", request(api="cuda"),
     [unit("n1", (VULKAN_ONLY, 1, 1))], [VULKAN_ONLY], {}, False, ["accelerator_api_mismatch"], ()),
    ("wrong vendor", request(vendor="nvidia"), [unit("n1", (MI, 1, 1))], [MI], {}, False,
     ["accelerator_api_mismatch", "accelerator_vendor_mismatch"], ()),
    ("no accelerators reported", request(vendor="nvidia"), [unit("n1")], [], {}, False,
     ["accelerator_none_reported"], ()),
    ("too little memory", request(vendor="nvidia", min_memory_bytes=40 * GIB), [unit("n1", (T4, 1, 1))], [T4], {},
     False, ["accelerator_memory_insufficient"], ()),
    ("memory unknown", request(min_memory_bytes=GIB), [unit("n1", (NO_MEMORY, 1, 1))], [NO_MEMORY], {}, False,
     ["accelerator_memory_unknown"], ()),
    ("memory picks the big card", request(vendor="nvidia", min_memory_bytes=40 * GIB),
     [unit("n1", (T4, 1, 1), (H100, 1, 1))], [T4, H100], {}, True, [], (("GPU-0", 1),)),
    ("reported free is zero", request(vendor="nvidia"), [unit("n1", (H100, 1, 0))], [H100], {}, False,
     ["accelerator_unavailable"], ()),
    ("Host claim not yet reported is subtracted", request(vendor="nvidia"), [unit("n1", (H100, 1, 1))], [H100],
     {("n1", "GPU-0"): 1}, False, ["accelerator_unavailable"], ()),
    ("claim already reported is not counted twice", request(count=1, vendor="nvidia"),
     [unit("n1", (H100, 1, 0), (H100B, 1, 1))], [H100, H100B], {("n1", "GPU-0"): 1}, True, [], (("GPU-1", 1),)),
    ("count spans devices of one unit", request(count=2, vendor="nvidia"),
     [unit("n1", (H100, 1, 1), (H100B, 1, 1))], [H100, H100B], {}, True, [], (("GPU-0", 1), ("GPU-1", 1))),
    ("count never spans units", request(count=2, vendor="nvidia"),
     [unit("n1", (H100, 1, 1)), unit("n2", (H100B, 1, 1))], [H100, H100B], {}, False,
     ["accelerator_unavailable"], ()),
    ("time-sliced device with allocatable 4", request(count=3),
     [unit("n1", (H100, 4, 4))], [H100], {("n1", "GPU-0"): 1}, True, [], (("GPU-0", 3),)),
    ("Apple unified memory admits by working-set limit", request(vendor="apple", min_memory_bytes=32 * GIB),
     [unit("machine", (APPLE, 1, 1))], [APPLE], {}, True, [], (("apple-gpu-0", 1),)),
    ("Apple working-set limit too small", request(vendor="apple", min_memory_bytes=64 * GIB),
     [unit("machine", (APPLE, 1, 1))], [APPLE], {}, False, ["accelerator_memory_insufficient"], ()),
    ("Apple already claimed by Host", request(vendor="apple"), [unit("machine", (APPLE, 1, 1))], [APPLE],
     {("machine", "apple-gpu-0"): 1}, False, ["accelerator_unavailable"], ()),
    ("Metal requested from an NVIDIA box", request(vendor="apple"), [unit("n1", (H100, 1, 1))], [H100], {}, False,
     ["accelerator_api_mismatch", "accelerator_vendor_mismatch"], ()),
])
def test_admission(name, req, units, devices, claimed, admitted, codes, allocations):
    result = rules.admit(req, units=units, devices=devices, claimed=claimed, grove="g")
    assert result.admitted is admitted, name
    assert [r.code for r in result.refusals] == codes, name
    assert result.allocations == allocations, name
    assert all(r.message for r in result.refusals)


def test_apple_admission_is_labelled_cooperative_and_nvidia_exclusive():
    apple = rules.admit(request(vendor="apple"), units=[unit("m", (APPLE, 1, 1))], devices=[APPLE], claimed={})
    nvidia = rules.admit(request(vendor="nvidia"), units=[unit("n", (H100, 1, 1))], devices=[H100], claimed={})
    assert (apple.label, apple.api, apple.vendor) == ("cooperative", "metal", "apple")
    assert (nvidia.label, nvidia.api, nvidia.vendor) == ("exclusive", "cuda", "nvidia")


@pytest.mark.parametrize(("free", "allocatable", "claimed", "expected"), [
    (1, 1, 0, 1), (1, 1, 1, 0), (0, 1, 0, 0), (0, 1, 1, 0), (3, 4, 2, 2), (4, 4, 5, 0),
])
def test_effective_free_is_reported_free_capped_by_host_claims(free, allocatable, claimed, expected):
    assert rules.effective_free(rules.Slot("x", allocatable, free), claimed) == expected


@pytest.mark.parametrize(("moment", "period", "start"), [
    (datetime(2026, 11, 18, 15, tzinfo=UTC), "day", date(2026, 11, 18)),
    (datetime(2026, 11, 18, 15, tzinfo=UTC), "week", date(2026, 11, 16)),
    (datetime(2026, 11, 18, 15, tzinfo=UTC), "month", date(2026, 11, 1)),
])
def test_period_start(moment, period, start):
    assert rules.period_start(moment, period) == start


def test_split_by_day_cuts_at_utc_midnight():
    start = datetime(2026, 11, 30, 23, 0, tzinfo=UTC)
    end = datetime(2026, 12, 1, 1, 30, tzinfo=UTC)
    assert rules.split_by_day(start, end) == [(date(2026, 11, 30), 3600.0), (date(2026, 12, 1), 5400.0)]
    assert rules.split_by_day(end, end) == []
