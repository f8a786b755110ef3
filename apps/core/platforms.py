"""Platform strings (``os/arch[/variant]``), as OCI and Go spell them. Pure: no Django.

A platform is valid only as a real pair: ``linux/amd64``, ``darwin/arm64``, ``linux/arm64/v8``.
``arm64`` without a variant and ``arm64/v8`` are the same platform; normalisation drops the redundant
variant so set intersection compares like with like.
"""
from __future__ import annotations

from dataclasses import dataclass

KNOWN_PAIRS: dict[str, frozenset[str]] = {
    "linux": frozenset({"amd64", "arm64", "arm", "386", "ppc64le", "s390x", "riscv64", "mips64le"}),
    "darwin": frozenset({"amd64", "arm64"}),
    "windows": frozenset({"amd64", "arm64", "386"}),
    "freebsd": frozenset({"amd64", "arm64"}),
}
KNOWN_VARIANTS: dict[str, frozenset[str]] = {
    "arm": frozenset({"v5", "v6", "v7"}),
    "arm64": frozenset({"v8", "v9"}),
    "amd64": frozenset({"v1", "v2", "v3", "v4"}),
}
# Variants that add nothing over the bare architecture (OCI image-spec "platform.variant" note).
DEFAULT_VARIANTS = {"arm64": "v8", "amd64": "v1"}


class PlatformError(ValueError):
    """Raised with a sentence naming the bad platform string."""


@dataclass(frozen=True, order=True)
class Platform:
    os: str
    arch: str
    variant: str = ""

    def __str__(self) -> str:
        return f"{self.os}/{self.arch}/{self.variant}" if self.variant else f"{self.os}/{self.arch}"


def parse_platform(value: object) -> Platform:
    """Parse and normalise one platform string, or raise ``PlatformError``."""
    if not isinstance(value, str):
        raise PlatformError(f"A platform must be a string like 'linux/amd64', not {type(value).__name__}.")
    parts = value.strip().lower().split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise PlatformError(f"'{value}' is not a platform; use os/arch[/variant], e.g. linux/amd64.")
    os_name, arch = parts[0], parts[1]
    variant = parts[2] if len(parts) == 3 else ""
    if os_name not in KNOWN_PAIRS:
        raise PlatformError(f"'{value}': unknown operating system '{os_name}'.")
    if arch not in KNOWN_PAIRS[os_name]:
        raise PlatformError(f"'{value}': {os_name} has no architecture '{arch}'.")
    if variant:
        if variant not in KNOWN_VARIANTS.get(arch, frozenset()):
            raise PlatformError(f"'{value}': '{variant}' is not a variant of {arch}.")
        if DEFAULT_VARIANTS.get(arch) == variant:
            variant = ""
    return Platform(os_name, arch, variant)


def normalise_platform(value: object) -> str:
    return str(parse_platform(value))
