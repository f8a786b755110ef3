"""The renderer against checked-in golden YAML, and every rendered object validated against the real
Kubernetes OpenAPI schemas (kubernetes-validate, pinned version) plus our own enum/DNS checks.

A golden changes only on purpose: `pytest agent/tests/test_kube_render.py --update-goldens`, then
review the diff. No cluster is involved: rendering is pure.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from forest_agent.kube import names
from forest_agent.kube.cli import to_yaml
from forest_agent.kube.render import GPU_RESOURCE, RenderConfig, render
from forest_agent.kube.spec import parse_job
from forest_agent.kube.validate import KUBERNETES_VERSION, RenderInvalid, validate_all, validate_object
from forest_agent.wire.messages import MessageInvalid

GOLDENS = Path(__file__).parent / "goldens"
CONFIG = RenderConfig(
    grove_id="5f0c8a52-1f9e-4c1b-9d7a-0d8a1b2c3d4e", data_url="https://forest.example/api/forest/v1/"
)
IMAGE = "registry.example/forest/step@sha256:" + "ab" * 32
JOB_ID = "0b5d2c1e-1111-4222-8333-444455556666"
A100 = "NVIDIA-A100-SXM4-40GB"


def wire_job(change_kind: str = "k8s.job", **payload: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "command": ["python", "-m", "train", "--epochs", "3"],
        "image": IMAGE,
        "env": {"STAGE": "train", "LOG_LEVEL": "info"},
        "timeout_s": 1800,
        "run_id": "7e57a1b2-0000-4000-8000-000000000001",
        "node": "train",
        "kind": "exec",
        "resources": {"cpu_milli": 2000, "memory_bytes": 4 * 1024**3},
        "platform": "linux/amd64",
        "trust": "trusted",
    }
    body.update(payload)
    return {
        "job_id": JOB_ID,
        "run_id": body["run_id"],
        "node": body["node"],
        "change_kind": change_kind,
        "idempotency_key": f"{body['run_id']}:{body['node']}:2",
        "payload": body,
    }


INPUT = {
    "name": "dataset",
    "digest": "sha256:" + "cd" * 32,
    "size": 1048576,
    "storage_kind": "cas",
    "reference": "sha256:" + "cd" * 32,
    "path": "data/train.csv",
}
OUTPUT = {"name": "model", "path": "out/model.bin", "key": "attempt-2/model"}
CLAIM = {"unit_id": "gpu-node-1", "devices": [{"inventory_id": "gpu-node-1/nvidia", "count": 1}]}
CASES: dict[str, tuple[dict[str, Any], dict[str, str]]] = {
    "plain_job": (wire_job(), {}),
    "untrusted_job": (wire_job(trust="untrusted"), {}),
    "deployment": (
        wire_job(
            "k8s.deployment",
            node="web",
            kind="deploy",
            command=[],
            timeout_s=600,
            ports=[{"name": "http", "port": 8080}],
            env_from=[{"config_map": "web-config"}, {"secret": "web-secrets"}],
        ),
        {},
    ),
    "gpu_job": (wire_job(accelerators={"count": 1, "vendor": "nvidia"}), {}),
    "gpu_job_memory_minimum": (
        wire_job(accelerators={"count": 2, "vendor": "nvidia", "min_memory_bytes": 40 * 1024**3}),
        {},
    ),
    "gpu_job_product": (
        wire_job(accelerators={"count": 1, "vendor": "nvidia"}, accelerator_claim=CLAIM),
        {"gpu-node-1/nvidia": A100},
    ),
    "data_job": (wire_job(inputs=[INPUT], outputs=[OUTPUT]), {}),
    "inputs_only_job": (wire_job(inputs=[INPUT]), {}),
}


def rendered(case: str) -> list[dict[str, Any]]:
    raw, models = CASES[case]
    return render(parse_job(copy.deepcopy(raw), models=models), CONFIG)


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendering_matches_its_golden_and_validates(case: str, update_goldens: bool) -> None:
    objects = validate_all(rendered(case))
    text = to_yaml(objects)
    golden = GOLDENS / f"{case}.yaml"
    if update_goldens:
        golden.write_text(text)
    assert golden.exists(), f"no golden for {case}; run with --update-goldens and review it"
    assert text == golden.read_text(), f"{case} changed; if intended, rerun with --update-goldens and review"
    # The YAML is what the client sends: it parses back to the same objects.
    assert list(yaml.safe_load_all(text)) == objects


def _pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    owner = next(o for o in objects if o["kind"] in ("Job", "Deployment"))
    return owner["spec"]["template"]["spec"]


def test_a_job_without_accelerators_gets_no_gpu_settings() -> None:
    pod = _pod(rendered("plain_job"))
    assert "runtimeClassName" not in pod and "affinity" not in pod and "tolerations" not in pod
    assert GPU_RESOURCE not in pod["containers"][0]["resources"]["limits"]


def test_gpu_job_limits_runtime_class_affinity_and_tolerations() -> None:
    pod = _pod(rendered("gpu_job_memory_minimum"))
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["containers"][0]["resources"]["limits"][GPU_RESOURCE] == "2"
    expressions = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]["matchExpressions"]
    assert {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]} in expressions
    # at least 40 GiB = 40960 MiB  <=>  gpu.memory > 40959
    assert {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["40959"]} in expressions
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    product = _pod(rendered("gpu_job_product"))["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]["matchExpressions"]
    assert {"key": "nvidia.com/gpu.product", "operator": "In", "values": [A100]} in product


def test_untrusted_work_is_isolated() -> None:
    objects = rendered("untrusted_job")
    namespace, policy, job = objects
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"] and policy["spec"]["egress"] == []
    assert job["metadata"]["namespace"] == namespace["metadata"]["name"] == policy["metadata"]["namespace"]
    pod = job["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    trusted = _pod(rendered("plain_job"))
    assert "automountServiceAccountToken" not in trusted


def test_every_pod_is_non_root_read_only_and_unprivileged() -> None:
    for case in CASES:
        pod = _pod(rendered(case))
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        sc = pod["containers"][0]["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"] == {"drop": ["ALL"]}


def test_labels_and_names_carry_job_run_and_generation() -> None:
    job = rendered("plain_job")[0]
    meta = job["metadata"]
    assert meta["name"] == names.job_object_name(JOB_ID, 2) == f"fj-{JOB_ID}-2"
    assert meta["labels"][names.LABEL_JOB_ID] == JOB_ID
    assert meta["labels"][names.LABEL_RUN_ID] == CASES["plain_job"][0]["run_id"]
    assert meta["annotations"][names.ANNOTATION_GENERATION] == "2"
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] == 1800
    # Rendering twice gives the same object: re-applying after a restart addresses the same Job.
    assert rendered("plain_job") == rendered("plain_job")


def test_schema_validation_rejects_unknown_fields_and_wrong_types() -> None:
    job = rendered("plain_job")[0]
    job["spec"]["template"]["spec"]["containers"][0]["bogus"] = 1
    with pytest.raises(RenderInvalid, match="bogus"):
        validate_object(job)
    job = rendered("plain_job")[0]
    job["spec"]["backoffLimit"] = "zero"
    with pytest.raises(RenderInvalid, match=KUBERNETES_VERSION):
        validate_object(job)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda j: j["spec"]["template"]["spec"].__setitem__("restartPolicy", "Always"), "restartPolicy"),
        (lambda j: j["metadata"].__setitem__("name", "Bad_Name"), "DNS-1123"),
        (lambda j: j["metadata"]["labels"].__setitem__("forest.dev/node", "ends-with-"), "label value"),
        (
            lambda j: j["spec"]["template"]["spec"].__setitem__(
                "tolerations", [{"key": "k", "operator": "Maybe", "effect": "NoSchedule"}]
            ),
            "operator",
        ),
        (
            lambda j: j["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"].__setitem__(
                "memory", "lots"
            ),
            "quantity",
        ),
    ],
)
def test_own_checks_catch_what_the_schema_cannot(mutate: Any, message: str) -> None:
    job = rendered("plain_job")[0]
    mutate(job)
    with pytest.raises(RenderInvalid, match=message):
        validate_object(job)


def test_gt_needs_exactly_one_integer() -> None:
    objects = rendered("gpu_job_memory_minimum")
    expr = _pod(objects)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]["matchExpressions"][-1]
    expr["values"] = ["forty"]
    with pytest.raises(RenderInvalid, match="Gt needs exactly one integer"):
        validate_object(objects[-1])


def test_a_build_job_without_a_command_runs_the_image_entrypoint() -> None:
    (job,) = render(parse_job(wire_job("k8s.build_job", command=[])), CONFIG)
    assert "command" not in job["spec"]["template"]["spec"]["containers"][0]
    validate_all([job])
    with pytest.raises(MessageInvalid, match="command"):
        parse_job(wire_job("k8s.job", command=[]))


def test_payload_refusals_name_the_field() -> None:
    with pytest.raises(MessageInvalid, match="image"):
        parse_job(wire_job(image=None))
    with pytest.raises(MessageInvalid, match="trust"):
        parse_job(wire_job(trust="maybe"))
    with pytest.raises(MessageInvalid, match="vendor"):
        parse_job(wire_job(accelerators={"count": 1, "vendor": "apple"}))


def test_the_cached_validator_agrees_with_kubernetes_validate() -> None:
    import kubernetes_validate

    from forest_agent.kube.validate import schema_validate

    for case in CASES:
        for obj in rendered(case):
            schema_validate(obj)
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    broken = rendered("plain_job")[0]
    broken["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"containerPort": "http"}]
    with pytest.raises(kubernetes_validate.ValidationError) as ours:
        schema_validate(broken)
    with pytest.raises(kubernetes_validate.ValidationError) as theirs:
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)
    assert ours.value.message == theirs.value.message


def test_the_render_command_prints_the_golden(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from forest_agent.kube.cli import main

    job = tmp_path / "job.json"
    job.write_text(json.dumps(CASES["gpu_job_product"][0]))
    code = main(["render", str(job), "--grove-id", CONFIG.grove_id, "--model", f"gpu-node-1/nvidia={A100}"])
    assert code == 0
    assert capsys.readouterr().out == (GOLDENS / "gpu_job_product.yaml").read_text()
    job.write_text("{not json")
    assert main(["render", str(job)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("forest-controller: error: agent_misconfigured:")
    job.write_text(json.dumps(wire_job(image=None)))
    assert main(["render", str(job)]) == 3
    assert "payload_invalid" in capsys.readouterr().err
