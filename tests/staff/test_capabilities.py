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
