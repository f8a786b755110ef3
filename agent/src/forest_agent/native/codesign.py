"""On macOS, `codesign --verify --deep --strict` every `*.app` at the top of an extracted bundle.

This is in addition to the Ed25519 bundle signature: it makes Gatekeeper-relevant damage (a sealed
resource changed after signing) a refusal instead of a runtime surprise.
"""

from __future__ import annotations

from pathlib import Path

from forest_agent.errors import BundleRefused
from forest_agent.oskit import CommandRunner


def verify_apps(root: Path, runner: CommandRunner) -> list[str]:
    """Verify each top-level app bundle; return the names verified. Raises on the first failure."""
    verified: list[str] = []
    for app in sorted(p for p in root.iterdir() if p.suffix == ".app" and p.is_dir() and not p.is_symlink()):
        result = runner.run(["codesign", "--verify", "--deep", "--strict", str(app)], timeout_s=120.0)
        if result is None:
            raise BundleRefused(
                "codesign is not available to verify the bundle's app", code="bundle_codesign_unavailable"
            )
        if result.returncode != 0:
            first = (result.stderr or result.stdout).strip().splitlines()
            raise BundleRefused(
                f"codesign rejected {app.name}: {first[0] if first else 'no detail'}",
                code="bundle_codesign_invalid",
            )
        verified.append(app.name)
    return verified
