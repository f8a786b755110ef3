"""Resource admission (apps/placement/admission.py): CPU, memory and accelerators together on one unit, with
"never" (beyond what any unit is allocatable) told apart from "not now" (beyond what is free), and a
sentence that says by how much."""
from __future__ import annotations

from apps.accelerators.rules import AcceleratorRequest, Device, Slot
from apps.placement.admission import FitState, Needs, UnitCapacity, consume, fit, unit_for

GIB = 1024**3
GPU = Device("GPU-0", "nvidia", ("cuda",), 80 * GIB, "dedicated", True, "exclusive")
GPU1 = Device("GPU-1", "nvidia", ("cuda",), 80 * GIB, "dedicated", True, "exclusive")


def unit(unit_id="u0", cpu=8, free_cpu=None, mem=32, free_mem=None, gpus=()):
    return UnitCapacity(unit_id, cpu * 1000, (cpu if free_cpu is None else free_cpu) * 1000, mem * GIB,
                        (mem if free_mem is None else free_mem) * GIB, tuple(gpus))


def test_cpu_beyond_every_unit_never_fits_and_says_by_how_much():
    verdict = fit(Needs(16_000, GIB), units=[unit(cpu=8), unit("u1", cpu=4)], grove="big")
    assert (verdict.state, verdict.code) == (FitState.NEVER, "resources_never_fit")
    assert verdict.message == "needs 16 CPU, the largest unit of Grove big has 8."


def test_cpu_beyond_what_is_free_waits_and_says_what_is_free():
    verdict = fit(Needs(16_000, GIB), units=[unit(cpu=32, free_cpu=8)], grove="busy")
    assert (verdict.state, verdict.code) == (FitState.LATER, "resources_unavailable")
    assert verdict.message == "needs 16 CPU, the largest free unit of Grove busy has 8."


def test_memory_is_checked_on_the_same_unit_as_cpu():
    # One unit has the CPU free, another the memory: neither has both.
    units = [unit("a", cpu=8, mem=64, free_mem=1), unit("b", cpu=8, free_cpu=1, mem=64)]
    verdict = fit(Needs(4000, 8 * GIB), units=units, grove="split")
    assert (verdict.state, verdict.code) == (FitState.LATER, "resources_unavailable")
    assert "on one unit" in verdict.message
    assert fit(Needs(4000, 128 * GIB), units=units, grove="split").message == (
        "needs 128 GiB memory, the largest unit of Grove split has 64 GiB.")


def test_accelerators_must_sit_on_a_unit_that_holds_the_cpu_too():
    gpus = (Slot("GPU-0", 1, 1),)
    units = [unit("gpu", cpu=2, gpus=gpus), unit("cpu", cpu=32)]
    verdict = fit(Needs(8000, GIB, AcceleratorRequest(count=1, vendor="nvidia", api="cuda")), units=units,
                  devices=[GPU], grove="mixed")
    assert (verdict.state, verdict.code) == (FitState.NEVER, "accelerator_never_fits")
    assert "has 0 allocatable" in verdict.message


def test_eight_gpus_on_a_four_gpu_unit_never_fit():
    units = [unit(gpus=tuple(Slot(f"GPU-{i}", 1, 1) for i in range(4)))]
    verdict = fit(Needs(1000, GIB, AcceleratorRequest(count=8, vendor="nvidia", api="cuda")), units=units,
                  devices=[Device(f"GPU-{i}", "nvidia", ("cuda",), None, "dedicated", True, "exclusive")
                           for i in range(4)], grove="k8s-gpu-1")
    assert (verdict.state, verdict.code) == (FitState.NEVER, "accelerator_never_fits")
    assert verdict.message == ("needs 8 accelerator(s) on one unit, the largest unit of Grove k8s-gpu-1 that "
                               "holds the CPU and memory has 4 allocatable.")


def test_a_claimed_gpu_waits_and_a_released_one_is_admitted():
    units = [unit(gpus=(Slot("GPU-0", 1, 1),))]
    request = Needs(1000, GIB, AcceleratorRequest(count=1, vendor="nvidia", api="cuda"))
    busy = fit(request, units=units, devices=[GPU], claimed={("u0", "GPU-0"): 1}, grove="g")
    assert (busy.state, busy.code) == (FitState.LATER, "accelerator_unavailable")
    free = fit(request, units=units, devices=[GPU], claimed={}, grove="g")
    assert free.now and free.unit_id == "u0" and free.admission.allocations == (("GPU-0", 1),)


def test_a_device_that_never_matches_keeps_its_own_code():
    verdict = fit(Needs(1000, GIB, AcceleratorRequest(count=1, vendor="amd", api="rocm")),
                  units=[unit(gpus=(Slot("GPU-0", 1, 1),))], devices=[GPU], grove="g")
    assert verdict.state == FitState.NEVER
    assert verdict.code in {"accelerator_vendor_mismatch", "accelerator_api_mismatch"}


def test_consume_hands_one_freed_unit_out_once():
    units = [unit(gpus=(Slot("GPU-0", 1, 1), Slot("GPU-1", 1, 1)))]
    request = Needs(3000, GIB, AcceleratorRequest(count=1, vendor="nvidia", api="cuda"))
    claimed: dict = {}
    admitted = 0
    for _ in range(4):
        verdict = fit(request, units=units, devices=[GPU, GPU1], claimed=claimed, grove="g")
        if not verdict.now:
            assert verdict.state == FitState.LATER
            continue
        units = consume(units, claimed, request, verdict)
        admitted += 1
    assert admitted == 2  # two GPUs, and 8 CPU would have held only two 3-CPU jobs as well
    assert units[0].cpu_free == 2000


def test_no_unit_reported_never_fits():
    verdict = fit(Needs(1000, GIB), units=[], grove="empty")
    assert (verdict.state, verdict.code) == (FitState.NEVER, "resources_never_fit")


def test_spread_takes_the_least_allocated_unit_that_holds_the_work_and_bin_pack_the_first():
    # a: half used; b: empty but small (the work is half of it); c: empty and large; d: too full to hold it.
    units = [unit("a", cpu=32, free_cpu=16), unit("b", cpu=8), unit("c", cpu=32), unit("d", cpu=32, free_cpu=2)]
    needs = Needs(4000, GIB)
    assert fit(needs, units=units).unit_id == "a"  # bin-pack (the default): the first that holds it
    assert fit(needs, units=units, spread=True).unit_id == "c"  # the least allocated once it is placed
    assert fit(needs, units=[unit("x", cpu=32), unit("y", cpu=32)], spread=True).unit_id == "x"  # equal: first
    # The shared rule, from the plain rows the decision core keeps (allocatable and free, in the Grove's order).
    allocatable = [(u.unit_id, u.cpu_allocatable, u.memory_allocatable) for u in units]
    free = [(u.unit_id, u.cpu_free, u.memory_free) for u in units]
    assert [unit_for(4000, GIB, allocatable, free, spread=spread) for spread in (False, True)] == ["a", "c"]
    assert unit_for(40_000, GIB, allocatable, free, spread=True) is None
