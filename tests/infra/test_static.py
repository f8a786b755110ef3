"""Static checks of infra/ with python-hcl2: the guards that keep gpu-bare-metal-1 inert, asserted together,
and the accelerator opt-in of the Grove module.

These parse every .tf file; they run no engine and need no provider. What the engine itself does with
the same files is in test_engine.py.
"""

from __future__ import annotations

import re

import pytest
import yaml

from apps.infra.policy import policy_load
from tests.infra.conftest import INFRA, blocks, hcl_load, locals_of, resources

ENVIRONMENT = "gpu-bare-metal-1"
UNASSIGNED_HOST = "gpu-host-unassigned"
GROVE = INFRA / "modules" / "grove"
CONFIG = GROVE / "modules" / "config"
GUARD = INFRA / "modules" / "host-guard"
ENV_DIR = INFRA / "environments" / ENVIRONMENT

ALL_TF = sorted(path for path in INFRA.rglob("*.tf") if ".terraform" not in path.parts)
GPU_WORDS = re.compile(r"gpu|nvidia|accelerat|runtime_class", re.IGNORECASE)


@pytest.mark.parametrize("path", ALL_TF, ids=lambda path: str(path.relative_to(INFRA)))
def test_every_tf_file_parses(path):
    assert isinstance(hcl_load(path), dict)


def test_gpu_environment_is_inert_by_every_guard_together():
    """Policy row, OpenTofu host guard and state authority all keep gpu-bare-metal-1 from running."""
    # 1. The apply-policy row: a host that does not exist, plan-only, nothing may be created or changed.
    policy = policy_load(policy_dir=INFRA / "policy", schema_dir=INFRA / "policy" / "schema")
    row = policy.apply_policy[ENVIRONMENT]
    assert (row.host, row.mode, row.max_creates, row.max_updates) == (UNASSIGNED_HOST, "plan-only", 0, 0)
    assert row.max_destroys == 0

    # 2. The environment's provider-free host guard names the same host, read from /etc/hostname.
    env_main = hcl_load(ENV_DIR / "main.tf")
    env_variables = blocks(hcl_load(ENV_DIR / "variables.tf"), "variable")
    guard_call = blocks(env_main, "module")["host_guard"]
    assert guard_call["source"] == "../../modules/host-guard"
    assert guard_call["expected_hostname"] == "${var.expected_hostname}"
    assert env_variables["expected_hostname"]["default"] == row.host
    assert guard_call["hostname_file"] == "${var.hostname_file}"
    assert env_variables["hostname_file"]["default"] == "/etc/hostname"

    # The guard itself fails the plan unless the file names the expected host, and needs no provider.
    guard_locals = locals_of(hcl_load(GUARD / "main.tf"))
    assert "file(var.hostname_file)" in guard_locals["observed_hostname"]
    assert guard_locals["host_matches"] == "${local.observed_hostname == var.expected_hostname}"
    guard_output = blocks(hcl_load(GUARD / "outputs.tf"), "output")["hostname"]
    assert guard_output["precondition"][0]["condition"] == "${local.host_matches}"
    assert "infra.wrong_host" in guard_output["precondition"][0]["error_message"]
    for path in GUARD.glob("*.tf"):
        document = hcl_load(path)
        assert "resource" not in document and "data" not in document and "provider" not in document
        for terraform_block in document.get("terraform", []):
            assert "required_providers" not in terraform_block

    # 3. No state authority: no machine holds its state, and the configuration declares no backend.
    assert ENVIRONMENT not in policy.state_authority
    raw_authority = yaml.safe_load((INFRA / "policy" / "state-authority.yaml").read_text())
    assert all(entry["environment"] != ENVIRONMENT for entry in raw_authority["environments"])
    for path in ENV_DIR.glob("*.tf"):
        for terraform_block in hcl_load(path).get("terraform", []):
            assert "backend" not in terraform_block and "cloud" not in terraform_block


def test_gpu_environment_uses_the_module_with_accelerators_on():
    grove_call = blocks(hcl_load(ENV_DIR / "main.tf"), "module")["grove"]
    assert grove_call["source"] == "../../modules/grove"
    assert grove_call["accelerators_enabled"] is True
    assert len(grove_call["control_planes"]) == 1
    assert len(grove_call["gpu_workers"]) == 1
    assert grove_call["gpu_workers"][0]["mesh_address"] == "${var.gpu_worker_mesh_address}"


@pytest.mark.parametrize("module_dir", [GROVE, CONFIG], ids=["grove", "grove/modules/config"])
def test_accelerators_default_to_off(module_dir):
    variable = blocks(hcl_load(module_dir / "variables.tf"), "variable")["accelerators_enabled"]
    assert variable["type"] == "bool"
    assert variable["default"] is False


def test_every_gpu_only_resource_is_gated_on_accelerators_enabled():
    """Each resource in accelerators.tf counts on create_accelerators; that local is the opt-in switch."""
    accelerators = hcl_load(GROVE / "accelerators.tf")
    accelerator_locals = locals_of(accelerators)
    assert accelerator_locals["create_accelerators"] == "${local.create && module.config.create_accelerators}"
    assert accelerator_locals["gpu_workers"].startswith("${local.create_accelerators ? ")
    assert accelerator_locals["gpu_workers"].endswith(" : {}}")

    gated = {**resources(accelerators), **resources(accelerators, "data")}
    assert set(gated) == {
        "talos_machine_configuration_apply.gpu_worker",
        "kubernetes_namespace_v1.gpu_operator",
        "helm_release.gpu_operator",
        "kubernetes_runtime_class_v1.nvidia",
    }
    for address, body in gated.items():
        gate = body.get("count") or body.get("for_each")
        assert gate in ("${local.create_accelerators ? 1 : 0}", "${local.gpu_workers}"), address
    assert "module" not in accelerators

    # The switch reaches the config submodule unchanged, and its output is exactly the switch.
    config_call = blocks(hcl_load(GROVE / "main.tf"), "module")["config"]
    assert config_call["accelerators_enabled"] == "${var.accelerators_enabled}"
    config_output = blocks(hcl_load(CONFIG / "outputs.tf"), "output")["create_accelerators"]
    assert config_output["value"] == "${var.accelerators_enabled}"

    # Nothing outside accelerators.tf is a GPU resource, and any GPU reference goes through the gate.
    for path in (GROVE / "main.tf", GROVE / "controller.tf"):
        document = hcl_load(path)
        for address, body in {**resources(document), **resources(document, "data")}.items():
            assert not GPU_WORDS.search(address), f"{path.name}: {address} looks GPU-only but is ungated"
            for reference in re.findall(r"(?:var|local|module)\.[\w.]+", str(body)):
                if GPU_WORDS.search(reference):
                    assert reference == "local.gpu_workers", f"{path.name}: {address} uses {reference}"


def test_controller_configmap_and_deploy_trigger_have_no_accelerator_keys_when_off():
    """The ConfigMap data and the deploy-trigger hash are one map; its base part never mentions GPUs."""
    config_locals = locals_of(hcl_load(CONFIG / "main.tf"))
    base = config_locals["controller_config_base"]
    assert not GPU_WORDS.search(base), base
    assert "var.accelerators_enabled" not in base
    assert config_locals["controller_config_accelerators"].startswith("${var.accelerators_enabled ? {")
    assert config_locals["controller_config_accelerators"].endswith(" : {}}")
    assert config_locals["controller_config"] == (
        "${merge(local.controller_config_base, local.controller_config_accelerators)}"
    )
    assert config_locals["controller_config_sha256"] == "${sha256(jsonencode(local.controller_config))}"

    # Extra keys cannot smuggle accelerator keys into an ordinary Grove.
    extra = blocks(hcl_load(CONFIG / "variables.tf"), "variable")["controller_extra_config"]
    assert 'startswith(key, "accelerators.")' in extra["validation"][0]["condition"]

    controller = resources(hcl_load(GROVE / "controller.tf"))
    assert controller["kubernetes_config_map_v1.controller"]["data"] == "${module.config.controller_config}"
    release_values = str(controller["helm_release.controller"]["values"])
    assert "module.config.controller_config_sha256" in release_values
    assert not GPU_WORDS.search(release_values)


def test_gpu_operator_values_disable_driver_and_toolkit():
    values = locals_of(hcl_load(CONFIG / "main.tf"))["gpu_operator_values"]
    assert values["driver"] == {"enabled": False}
    assert values["toolkit"] == {"enabled": False}


def _module_dirs():
    return sorted(path.parent for path in INFRA.rglob("versions.tf") if ".terraform" not in path.parts)


@pytest.mark.parametrize("module_dir", _module_dirs(), ids=lambda path: str(path.relative_to(INFRA)))
def test_module_layout_and_variables_are_complete(module_dir):
    """terraform-aws-modules layout, and every variable with description, type, default and validation."""
    for name in ("main.tf", "variables.tf", "outputs.tf", "versions.tf"):
        assert (module_dir / name).is_file(), f"{module_dir.relative_to(INFRA)} lacks {name}"
    if "modules" in module_dir.relative_to(INFRA).parts:
        assert (module_dir / "README.md").is_file()
    for name, body in blocks(hcl_load(module_dir / "variables.tf"), "variable").items():
        for key in ("description", "type", "default"):
            assert key in body, f"variable {name} lacks {key}"
        if body["type"] != "bool":
            assert body.get("validation"), f"variable {name} has no validation block"
    for name, body in blocks(hcl_load(module_dir / "outputs.tf"), "output").items():
        assert body.get("description"), f"output {name} lacks a description"


def test_every_environment_has_a_policy_row_and_every_row_an_environment():
    policy = policy_load(policy_dir=INFRA / "policy", schema_dir=INFRA / "policy" / "schema")
    folders = {path.name for path in (INFRA / "environments").iterdir() if path.is_dir()}
    assert folders == set(policy.apply_policy)
    assert set(policy.state_authority) <= folders


def _grove_calls():
    for env_dir in sorted(path for path in (INFRA / "environments").iterdir() if path.is_dir()):
        for path in env_dir.glob("*.tf"):
            for name, call in blocks(hcl_load(path), "module").items():
                if call.get("source") == "../../modules/grove":
                    yield env_dir, path, name, call


def test_every_grove_depends_on_its_environments_host_guard():
    """A `-target` run plans only the targets and their dependencies: the guard must be one of them
    (the real-engine proof is test_standin.py)."""
    calls = list(_grove_calls())
    assert calls, "no environment uses modules/grove"
    for env_dir, path, name, call in calls:
        guards = {n for p in env_dir.glob("*.tf") for n, c in blocks(hcl_load(p), "module").items()
                  if c.get("source") == "../../modules/host-guard"}
        assert guards, f"{env_dir.name} has no host guard"
        assert {f"${{module.{guard}}}" for guard in guards} <= set(call.get("depends_on", [])), (
            f"{path.relative_to(INFRA)}: module {name} must depend on {sorted(guards)}")


def test_the_runtime_class_handler_is_nvidia_and_matches_the_controller():
    """The handler the nvidia-container-toolkit extension registers, the RuntimeClass name the config
    submodule hands out, and what forest-controller puts in GPU pods must all be `nvidia`."""
    from forest_agent.kube.controller import ControllerConfig

    runtime_class = resources(hcl_load(GROVE / "accelerators.tf"))["kubernetes_runtime_class_v1.nvidia"]
    assert runtime_class["handler"] == "nvidia"
    assert runtime_class["metadata"] == [{"name": "${module.config.runtime_class_name}"}]
    output = blocks(hcl_load(CONFIG / "outputs.tf"), "output")["runtime_class_name"]
    assert output["value"] == '${var.accelerators_enabled ? "nvidia" : null}'
    config_locals = locals_of(hcl_load(CONFIG / "main.tf"))
    assert '"accelerators.runtime_class" = "nvidia"' in config_locals["controller_config_accelerators"]
    assert ControllerConfig().runtime_class == "nvidia"


def test_gpu_workers_receive_the_nvidia_patches_and_the_operator_its_values():
    gated = resources(hcl_load(GROVE / "accelerators.tf"))
    patches = gated["talos_machine_configuration_apply.gpu_worker"]["config_patches"]
    assert patches.startswith("${concat(module.config.gpu_worker_config_patches, ["), patches
    assert gated["talos_machine_configuration_apply.gpu_worker"]["for_each"] == "${local.gpu_workers}"
    assert gated["helm_release.gpu_operator"]["values"] == ["${module.config.gpu_operator_values}"]
    output = blocks(hcl_load(CONFIG / "outputs.tf"), "output")["gpu_worker_config_patches"]
    assert output["value"] == "${var.accelerators_enabled ? [yamlencode(local.gpu_worker_config_patch)] : []}"
