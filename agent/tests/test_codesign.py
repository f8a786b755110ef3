"""macOS `codesign --verify` of apps inside an extracted bundle, with recorded codesign answers
(codesign does not exist on Linux; the directory walk and refusal mapping are real)."""

from __future__ import annotations

from pathlib import Path

import pytest

from forest_agent.errors import BundleRefused
from forest_agent.native.codesign import verify_apps
from forest_agent.oskit import CommandResult, CommandRunner

# Recorded from `codesign --verify --deep --strict` on macOS 14.
VALID = CommandResult(0, "", "")
MODIFIED = CommandResult(
    1,
    "",
    "Worker.app: a sealed resource is missing or invalid\n"
    "file modified: /private/var/forest/app/Worker.app/Contents/Resources/model.bin\n",
)
UNSIGNED = CommandResult(1, "", "Worker.app: code object is not signed at all\nIn architecture: arm64\n")


class Recorded(CommandRunner):
    def __init__(self, answer: CommandResult | None) -> None:
        self.answer = answer
        self.calls: list[list[str]] = []

    def run(self, argv: list[str], timeout_s: float = 15.0) -> CommandResult | None:
        self.calls.append(argv)
        return self.answer


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    (tmp_path / "Worker.app" / "Contents").mkdir(parents=True)
    (tmp_path / "bin").mkdir()
    return tmp_path


def test_a_valid_app_is_verified_with_deep_strict(bundle: Path) -> None:
    runner = Recorded(VALID)
    assert verify_apps(bundle, runner) == ["Worker.app"]
    assert runner.calls == [["codesign", "--verify", "--deep", "--strict", str(bundle / "Worker.app")]]


@pytest.mark.parametrize(("answer", "needle"), [(MODIFIED, "sealed resource"), (UNSIGNED, "not signed")])
def test_a_broken_signature_is_refused_with_codesign_invalid(bundle: Path, answer, needle) -> None:
    with pytest.raises(BundleRefused) as caught:
        verify_apps(bundle, Recorded(answer))
    assert caught.value.code == "bundle_codesign_invalid"
    assert needle in caught.value.message


def test_missing_codesign_is_its_own_refusal(bundle: Path) -> None:
    with pytest.raises(BundleRefused) as caught:
        verify_apps(bundle, Recorded(None))
    assert caught.value.code == "bundle_codesign_unavailable"


def test_a_bundle_without_apps_needs_no_codesign(tmp_path: Path) -> None:
    runner = Recorded(None)
    assert verify_apps(tmp_path, runner) == []
    assert runner.calls == []
