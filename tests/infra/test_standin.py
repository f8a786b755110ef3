"""The Grove module's resource set, and the host guard under ``-target``, planned on a real engine.

The module's providers cannot be downloaded here, so ``standin.py`` generates a provider-free copy
with the same ``count``/``for_each`` on every resource (see its docstring). What these plans prove:

* an ordinary Grove plans exactly the ordinary resources, and turning accelerators on adds exactly
  the GPU ones: a new GPU-only resource that is not gated on ``accelerators_enabled`` changes the
  ordinary set and fails here, whatever it is called (no name heuristic);
* ``plan -target=module.grove...`` on the wrong host still fails on the host guard, because the
  environment makes the Grove depend on it; without that ``depends_on`` the same targeted plan runs.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.infra.conftest import INFRA, engine_init, engine_plan, one_line
from tests.infra.standin import declared_addresses, write_standin

SCHEMATIC_ID = "a" * 64
CONTROL_PLANES = 'control_planes=[{name="cp-0", address="10.0.0.10"}]'
WORKERS = 'workers=[{name="w-0", address="10.0.0.11"}]'
GPU_WORKERS = 'gpu_workers=[{name="gpu-0", mesh_address="10.1.0.5", install_disk="/dev/nvme0n1"}]'

ORDINARY = {
    "terraform_data.libvirt_volume__talos_base[0]",
    'terraform_data.libvirt_volume__node["cp-0"]',
    'terraform_data.libvirt_volume__node["w-0"]',
    'terraform_data.libvirt_domain__node["cp-0"]',
    'terraform_data.libvirt_domain__node["w-0"]',
    "terraform_data.talos_machine_secrets__this[0]",
    "terraform_data.data__talos_machine_configuration__control_plane[0]",
    "terraform_data.data__talos_machine_configuration__worker[0]",
    'terraform_data.talos_machine_configuration_apply__control_plane["cp-0"]',
    'terraform_data.talos_machine_configuration_apply__worker["w-0"]',
    "terraform_data.talos_machine_bootstrap__this[0]",
    "terraform_data.talos_cluster_kubeconfig__this[0]",
    "terraform_data.data__talos_client_configuration__this[0]",
    "terraform_data.kubernetes_namespace_v1__controller[0]",
    "terraform_data.kubernetes_config_map_v1__controller[0]",
    "terraform_data.helm_release__controller[0]",
}
GPU = {
    'terraform_data.talos_machine_configuration_apply__gpu_worker["gpu-0"]',
    "terraform_data.kubernetes_namespace_v1__gpu_operator[0]",
    "terraform_data.helm_release__gpu_operator[0]",
    "terraform_data.kubernetes_runtime_class_v1__nvidia[0]",
}


def _planned(engine, cwd: Path, *variables: str) -> set[str]:
    result = engine_plan(engine, cwd, *variables)
    assert result.returncode == 0, one_line(result.stderr)
    shown = engine.run(["show", "-json", "-no-color", "test.tfplan"], cwd=cwd)
    assert shown.returncode == 0, shown.stderr
    changes = json.loads(shown.stdout).get("resource_changes") or []
    return {c["address"] for c in changes if "create" in c["change"]["actions"]}


@pytest.fixture
def standin(engine, tmp_path):
    workdir = write_standin(tmp_path / "grove")
    engine_init(engine, workdir)
    return workdir


def test_an_ordinary_grove_plans_exactly_the_ordinary_resources(engine, standin):
    assert _planned(engine, standin, CONTROL_PLANES, WORKERS) == ORDINARY


def test_accelerators_add_exactly_the_gpu_resources(engine, standin):
    on = _planned(engine, standin, CONTROL_PLANES, WORKERS, GPU_WORKERS, "accelerators_enabled=true",
                  f"nvidia_talos_schematic_id={SCHEMATIC_ID}")
    assert on == ORDINARY | GPU
    # The GPU set is what accelerators.tf declares, and nothing it declares plans while the switch is off.
    declared = declared_addresses("accelerators.tf")
    assert {re.sub(r"\[.*\]$", "", address) for address in GPU} == declared
    assert not {re.sub(r"\[.*\]$", "", address) for address in ORDINARY} & declared


def test_create_false_plans_nothing(engine, standin):
    assert _planned(engine, standin, CONTROL_PLANES, WORKERS, "create=false") == set()


# --- the host guard under -target ----------------------------------------------------------------------

ENV_DIR = INFRA / "environments" / "gpu-bare-metal-1"
ENV_VARIABLES = ("control_plane_address=10.0.0.10", "gpu_worker_mesh_address=10.1.0.5",
                 f"nvidia_talos_schematic_id={SCHEMATIC_ID}")
TARGETS = ("module.grove", "module.grove.terraform_data.talos_machine_secrets__this",
           "module.grove.terraform_data.kubernetes_runtime_class_v1__nvidia")


def _environment(tmp_path: Path, *, keep_depends_on: bool = True) -> Path:
    """The committed environment's main.tf and variables.tf, its module sources pointed at the stand-in."""
    write_standin(tmp_path / "grove")
    shutil.copytree(INFRA / "modules" / "host-guard", tmp_path / "host-guard")
    env = tmp_path / "env"
    env.mkdir()
    main = (ENV_DIR / "main.tf").read_text()
    main = main.replace('"../../modules/grove"', '"../grove"').replace('"../../modules/host-guard"', '"../host-guard"')
    if not keep_depends_on:
        main, removed = re.subn(r"\n\s*depends_on\s*=\s*\[module\.host_guard\]\n", "\n", main)
        assert removed == 1
    (env / "main.tf").write_text(main)
    shutil.copy(ENV_DIR / "variables.tf", env / "variables.tf")
    return env


def _targeted_plan(engine, env: Path, target: str, *variables: str):
    argv = ["plan", "-input=false", "-no-color", f"-target={target}"]
    argv += [f"-var={v}" for v in (*ENV_VARIABLES, *variables)]
    return engine.run(argv, cwd=env)


@pytest.mark.parametrize("target", TARGETS)
def test_a_targeted_run_on_the_wrong_host_still_fails_on_the_guard(engine, tmp_path, target):
    env = _environment(tmp_path)
    engine_init(engine, env)
    result = _targeted_plan(engine, env, target)
    assert result.returncode == 1
    assert "infra.wrong_host: environment gpu-bare-metal-1 is inert on this machine" in one_line(result.stderr)


def test_the_targeted_run_passes_on_the_expected_host(engine, tmp_path):
    env = _environment(tmp_path)
    engine_init(engine, env)
    hostname = tmp_path / "hostname"
    hostname.write_text("gpu-host-unassigned\n")
    result = _targeted_plan(engine, env, TARGETS[1], f"hostname_file={hostname}")
    assert result.returncode == 0, one_line(result.stderr)


def test_without_the_dependency_a_targeted_run_would_escape_the_guard(engine, tmp_path):
    """Why the environment's ``depends_on`` exists: remove it and the same targeted plan runs here."""
    env = _environment(tmp_path, keep_depends_on=False)
    engine_init(engine, env)
    result = _targeted_plan(engine, env, TARGETS[1])
    assert result.returncode == 0, one_line(result.stderr)
