"""Apple GPU inventory on darwin/arm64 from `system_profiler SPDisplaysDataType -json` and `sysctl`.

The GPU shares unified memory with the CPU: memory is `unified`, not enforced, and sharing is
`cooperative`. `memory_bytes` is the GPU wired (working-set) limit when the OS reports one
(`iogpu.wired_limit_mb` on macOS 14+, `debug.iogpu.wired_limit` bytes on macOS 13); otherwise the
machine's unified memory (`hw.memsize`), which is an upper bound, not a promise.
"""

from __future__ import annotations

import json
import logging

from forest_agent.inventory.item import AcceleratorItem
from forest_agent.oskit import CommandRunner

log = logging.getLogger(__name__)

SYSTEM_PROFILER_ARGV = ["system_profiler", "SPDisplaysDataType", "-json"]
SYSCTL_ARGV = ["sysctl", "hw.memsize", "iogpu.wired_limit_mb", "debug.iogpu.wired_limit"]
_MIB = 1024 * 1024


def parse_sysctl(text: str) -> dict[str, str]:
    """`name: value` lines (sysctl prints known names even when another name is unknown)."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep:
            values[name.strip()] = value.strip()
    return values


def gpu_memory_limit(sysctl: dict[str, str]) -> int | None:
    """The working-set limit if one is set (0 means "OS default", which is not reported)."""
    mb = sysctl.get("iogpu.wired_limit_mb", "")
    if mb.isdigit() and int(mb) > 0:
        return int(mb) * _MIB
    raw = sysctl.get("debug.iogpu.wired_limit", "")
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    return None


def parse_system_profiler(text: str, sysctl: dict[str, str]) -> list[AcceleratorItem]:
    try:
        data = json.loads(text)
    except ValueError:
        log.warning("system_profiler output is not JSON; no Apple GPU inventory")
        return []
    gpus = data.get("SPDisplaysDataType") if isinstance(data, dict) else None
    if not isinstance(gpus, list):
        return []
    memsize = sysctl.get("hw.memsize", "")
    memory = gpu_memory_limit(sysctl) or (int(memsize) if memsize.isdigit() else None)
    items: list[AcceleratorItem] = []
    for gpu in gpus:
        if not isinstance(gpu, dict):
            continue
        vendor = str(gpu.get("spdisplays_vendor", ""))
        model = str(gpu.get("sppci_model") or gpu.get("_name") or "")
        # Apple Silicon reports vendor "sppci_vendor_Apple"; Intel Macs' discrete/integrated GPUs do not.
        if "apple" not in vendor.lower() and not model.startswith("Apple"):
            continue
        items.append(
            AcceleratorItem(
                id=f"apple-gpu-{len(items)}",
                kind="gpu",
                vendor="apple",
                model=model,
                apis=("metal",),
                memory_bytes=memory,
                memory_kind="unified",
                memory_enforced=False,
                share_mode="cooperative",
            )
        )
    return items


def collect_apple(runner: CommandRunner) -> list[AcceleratorItem]:
    profiler = runner.run(SYSTEM_PROFILER_ARGV, timeout_s=30.0)
    if profiler is None or profiler.returncode != 0:
        log.info("system_profiler unavailable; no Apple GPU inventory")
        return []
    sysctl_result = runner.run(SYSCTL_ARGV)
    sysctl = parse_sysctl(sysctl_result.stdout) if sysctl_result is not None else {}
    return parse_system_profiler(profiler.stdout, sysctl)
