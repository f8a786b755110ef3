"""Accelerator inventory for the current platform: picks the parser (``nvidia``, ``apple``) that applies."""

from __future__ import annotations

import logging

from forest_agent.inventory.apple import collect_apple
from forest_agent.inventory.item import AcceleratorItem
from forest_agent.inventory.nvidia import collect_nvidia
from forest_agent.oskit import CommandRunner

log = logging.getLogger(__name__)


def collect_accelerators(runner: CommandRunner, platform: str) -> list[AcceleratorItem]:
    """NVIDIA on Linux, the Apple GPU on darwin/arm64; anything else (or absent tools) is none."""
    if platform.startswith("linux/"):
        return collect_nvidia(runner)
    if platform == "darwin/arm64":
        return collect_apple(runner)
    log.info("no accelerator inventory for platform %s", platform)
    return []
