"""Accelerator inventory parsed from recorded `nvidia-smi`, `system_profiler` and `sysctl` output.

The commands are replaced by a recording runner (these tools do not exist on the CI machine); the
parsers and collection paths are the real ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from forest_agent.inventory import capacity_report, collect_accelerators
from forest_agent.inventory.apple import SYSCTL_ARGV, SYSTEM_PROFILER_ARGV
from forest_agent.inventory.nvidia import NVIDIA_SMI_ARGV, parse_nvidia_smi
from forest_agent.oskit import CommandResult, CommandRunner, machine_platform

RECORDED = Path(__file__).parent / "recorded"
MIB = 1024 * 1024


class RecordedRunner(CommandRunner):
    """Answers known argv with recorded output; any other command is 'not installed'."""

    def __init__(self, answers: dict[tuple[str, ...], CommandResult]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def run(self, argv: list[str], timeout_s: float = 15.0) -> CommandResult | None:
        self.calls.append(argv)
        return self.answers.get(tuple(argv))


def recorded(name: str, returncode: int = 0) -> CommandResult:
    return CommandResult(returncode, (RECORDED / name).read_text(), "")


def nvidia(name: str, returncode: int = 0) -> RecordedRunner:
    return RecordedRunner({tuple(NVIDIA_SMI_ARGV): recorded(name, returncode)})


def apple(profiler: str, sysctl: str, sysctl_rc: int = 0) -> RecordedRunner:
    return RecordedRunner(
        {
            tuple(SYSTEM_PROFILER_ARGV): recorded(profiler),
            tuple(SYSCTL_ARGV): recorded(sysctl, sysctl_rc),
        }
    )


def test_eight_h100s_become_eight_cuda_items_keyed_by_uuid() -> None:
    items = collect_accelerators(nvidia("nvidia_smi_h100_x8.csv"), "linux/amd64")
    assert len(items) == 8
    assert items[0].to_wire() == {
        "id": "GPU-4a3c7c1e-2b8f-9d0e-6f1a-0c5b3e2d1a90",
        "kind": "gpu",
        "vendor": "nvidia",
        "model": "NVIDIA H100 80GB HBM3",
        "apis": ["cuda"],
        "memory_bytes": 81559 * MIB,
        "memory_kind": "dedicated",
        "memory_enforced": True,
        "share_mode": "exclusive",
    }
    assert len({i.id for i in items}) == 8


def test_h200_memory_is_mib_times_two_to_the_twenty() -> None:
    [item] = collect_accelerators(nvidia("nvidia_smi_h200.csv"), "linux/arm64")
    assert item.model == "NVIDIA H200"
    assert item.memory_bytes == 143771 * MIB


def test_mixed_a100_sizes_keep_their_own_memory() -> None:
    items = collect_accelerators(nvidia("nvidia_smi_a100_mixed.csv"), "linux/amd64")
    assert [(i.model, i.memory_bytes) for i in items] == [
        ("NVIDIA A100-SXM4-40GB", 40960 * MIB),
        ("NVIDIA A100-SXM4-80GB", 81920 * MIB),
    ]


def test_odd_whitespace_and_crlf_are_tolerated() -> None:
    items = collect_accelerators(nvidia("nvidia_smi_odd_whitespace.csv"), "linux/amd64")
    assert [(i.id, i.model, i.memory_bytes) for i in items] == [
        ("GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", "NVIDIA GeForce RTX 4090", 24564 * MIB),
        ("GPU-ffffffff-0000-1111-2222-333333333333", "Tesla T4", 15360 * MIB),
    ]


def test_not_available_memory_is_null_and_a_gpu_without_uuid_is_skipped() -> None:
    items = collect_accelerators(nvidia("nvidia_smi_not_available.csv"), "linux/amd64")
    assert [(i.id, i.memory_bytes) for i in items] == [("GPU-12345678-90ab-cdef-1234-567890abcdef", None)]


def test_a_name_with_a_comma_keeps_the_whole_name() -> None:
    [item] = parse_nvidia_smi("0, GPU-1, NVIDIA Weird, Name, 1024\n")
    assert item.model == "NVIDIA Weird, Name"
    assert item.memory_bytes == 1024 * MIB


@pytest.mark.parametrize(
    ("name", "rc"), [("nvidia_smi_no_devices.txt", 6), ("nvidia_smi_driver_failed.txt", 9)]
)
def test_nvidia_smi_failures_mean_no_inventory(name: str, rc: int) -> None:
    assert collect_accelerators(nvidia(name, rc), "linux/amd64") == []


def test_missing_tools_mean_no_inventory_not_a_crash() -> None:
    assert collect_accelerators(RecordedRunner({}), "linux/amd64") == []
    assert collect_accelerators(RecordedRunner({}), "darwin/arm64") == []


def test_m1_max_default_wired_limit_reports_unified_memory_total() -> None:
    [item] = collect_accelerators(
        apple("system_profiler_m1_max.json", "sysctl_m1_max_default_limit.txt"), "darwin/arm64"
    )
    assert item.to_wire() == {
        "id": "apple-gpu-0",
        "kind": "gpu",
        "vendor": "apple",
        "model": "Apple M1 Max",
        "apis": ["metal"],
        "memory_bytes": 64 * 1024**3,
        "memory_kind": "unified",
        "memory_enforced": False,
        "share_mode": "cooperative",
    }


def test_m2_max_reports_its_working_set_limit_when_set() -> None:
    [item] = collect_accelerators(
        apple("system_profiler_m2_max_headless.json", "sysctl_m2_max_wired_limit.txt"), "darwin/arm64"
    )
    assert item.model == "Apple M2 Max"
    assert item.memory_bytes == 90112 * MIB


def test_m3_max_on_an_os_without_iogpu_sysctl_falls_back_to_memsize() -> None:
    # sysctl exits 1 for the unknown names but still prints hw.memsize.
    [item] = collect_accelerators(
        apple("system_profiler_m3_max.json", "sysctl_m3_max_no_iogpu.txt", 1), "darwin/arm64"
    )
    assert item.model == "Apple M3 Max"
    assert item.memory_bytes == 128 * 1024**3


def test_ventura_debug_wired_limit_is_in_bytes() -> None:
    [item] = collect_accelerators(
        apple("system_profiler_m1_max.json", "sysctl_ventura_debug_limit.txt"), "darwin/arm64"
    )
    assert item.memory_bytes == 48 * 1024**3


def test_intel_mac_gpus_are_not_reported_as_apple_metal_items() -> None:
    runner = apple("system_profiler_intel_mac.json", "sysctl_m1_max_default_limit.txt")
    assert collect_accelerators(runner, "darwin/arm64") == []


def test_garbage_from_system_profiler_is_no_inventory() -> None:
    runner = RecordedRunner({tuple(SYSTEM_PROFILER_ARGV): CommandResult(0, "not json", "")})
    assert collect_accelerators(runner, "darwin/arm64") == []


def test_other_platforms_do_not_run_any_tool() -> None:
    runner = RecordedRunner({})
    assert collect_accelerators(runner, "windows/amd64") == []
    assert runner.calls == []


def test_capacity_report_is_one_machine_unit_linking_the_accelerators() -> None:
    items = collect_accelerators(nvidia("nvidia_smi_a100_mixed.csv"), "linux/amd64")
    report = capacity_report(items, cpu_count=16, memory_bytes=128 * 1024**3)
    assert report["placement_units"] == [
        {
            "id": "machine",
            "cpu_milli": {"allocatable": 16000, "free": 16000},
            "memory_bytes": {"allocatable": 128 * 1024**3, "free": 128 * 1024**3},
            "accelerators": [{"inventory_id": i.id, "allocatable": 1, "free": 1} for i in items],
        }
    ]
    assert [a["id"] for a in report["accelerators"]] == [i.id for i in items]


def test_capacity_report_uses_psutil_on_this_machine() -> None:
    unit = capacity_report([])["placement_units"][0]
    assert unit["cpu_milli"]["allocatable"] >= 1000
    assert unit["memory_bytes"]["allocatable"] > 0


@pytest.mark.parametrize(
    ("system", "machine", "expected"),
    [
        ("Linux", "x86_64", "linux/amd64"),
        ("Linux", "aarch64", "linux/arm64"),
        ("Darwin", "arm64", "darwin/arm64"),
    ],
)
def test_machine_platform(system: str, machine: str, expected: str) -> None:
    assert machine_platform(system, machine) == expected
