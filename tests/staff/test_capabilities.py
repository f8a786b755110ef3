"""The capability status registry: every flag has a row, and the README's generated table is current."""
from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from apps.flags.registry import FLAGS
from apps.staff import capabilities
from apps.staff.management.commands.capability_status import rendered_readme


def test_every_declared_flag_gates_a_capability_row():
    assert capabilities.missing_flags(FLAGS) == []
    assert capabilities.missing_flags([*FLAGS, "host.new.flag"]) == ["host.new.flag"]


def test_every_row_has_a_known_state_and_gated_rows_name_a_declared_flag():
    for capability in capabilities.CAPABILITIES:
        assert capability.state in capabilities.STATES and capability.evidence
        assert (capability.state == capabilities.GATED) == bool(capability.flag)
        assert not capability.flag or capability.flag in FLAGS


def test_the_readme_table_is_current():
    current, fresh = rendered_readme()
    assert current == fresh, "README.md is stale: run manage.py capability_status --write"


def test_check_fails_on_a_stale_readme(tmp_path, settings):
    (tmp_path / "README.md").write_text(f"# x\n{capabilities.BEGIN}\n| old |\n{capabilities.END}\n")
    settings.BASE_DIR = tmp_path
    with pytest.raises(CommandError, match="stale"):
        call_command("capability_status", "--check")
    call_command("capability_status", "--write")
    call_command("capability_status", "--check")
    assert "| Jobs on an NVIDIA GPU (CUDA) | needs hardware not present |" in (tmp_path / "README.md").read_text()


def problems(exists, source, rows: tuple[capabilities.Capability, ...] | None = None) -> list[str]:
    """What is untrue about the registry, given ``exists(path) -> bool`` and ``source(path) -> str`` over the
    repository: a named test or code path that is missing, a ``path::test`` whose function is not in the file,
    a row with no test, and a row that calls code missing while its code exists."""
    found = []
    for capability in capabilities.CAPABILITIES if rows is None else rows:
        if not capability.tests:
            found.append(f"{capability.name}: names no test")
        for test in capability.tests:
            path, _, name = test.partition("::")
            if not exists(path):
                found.append(f"{capability.name}: test {path} does not exist")
            elif name and f"def {name}(" not in source(path):
                found.append(f"{capability.name}: {path} has no test {name}")
        present = [path for path in capability.code if exists(path)]
        found.extend(f"{capability.name}: code {path} does not exist" for path in capability.code
                     if not exists(path))
        said = capability.evidence.lower()
        if present and any(word in said for word in capabilities.MISSING_WORDS):
            found.append(f"{capability.name}: says its code is missing, but {present[0]} exists")
    return found


def _repo():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    return (lambda path: (root / path).exists()), (lambda path: (root / path).read_text())


def test_every_row_names_tests_and_code_that_exist_and_no_row_calls_existing_code_missing():
    exists, source = _repo()
    assert problems(exists, source) == []


def test_the_check_catches_a_missing_test_and_a_row_that_calls_existing_code_missing():
    exists, source = _repo()
    broken = (capabilities.Capability("Kubernetes Groves", capabilities.HARDWARE,
                                      "no forest-controller is in this repository yet",
                                      tests=("tests/e2e/test_kube_controller.py::test_nothing_by_this_name",
                                             "tests/nowhere.py"),
                                      code=("agent/src/forest_agent/kube/controller.py",)),)
    found = problems(exists, source, broken)
    assert any("has no test test_nothing_by_this_name" in item for item in found)
    assert any("tests/nowhere.py does not exist" in item for item in found)
    assert any("says its code is missing" in item for item in found)
