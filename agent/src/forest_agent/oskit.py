"""OS facts behind small objects tests can swap: the clock and external command execution.

Only what makes tests honest *and* fast goes through here; native jobs and the supervisor still
spawn real processes in tests.
"""

from __future__ import annotations

import platform
import subprocess
import time
from dataclasses import dataclass


class Clock:
    """Monotonic time for deadlines, wall time for what Host and the journal store."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    stdout: str
    stderr: str


class CommandRunner:
    """Runs short inspection commands (nvidia-smi, system_profiler, sysctl, codesign).

    A missing binary is a normal answer (`None`), not an exception: a Linux box without NVIDIA tools
    simply has no NVIDIA inventory.
    """

    def run(self, argv: list[str], timeout_s: float = 15.0) -> CommandResult | None:
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
        except (FileNotFoundError, PermissionError, subprocess.TimeoutExpired):
            return None
        return CommandResult(proc.returncode, proc.stdout, proc.stderr)


_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def machine_platform(system: str | None = None, machine: str | None = None) -> str:
    """This machine as an `os/arch` platform string, e.g. `linux/amd64`, `darwin/arm64`."""
    os_name = (system or platform.system()).lower()
    arch = (machine or platform.machine()).lower()
    return f"{os_name}/{_ARCH.get(arch, arch)}"
