"""examples/gpu-smoke: the graph builder is what is checked in, and each step renders, from the payload
Host really sends, to the checked-in golden YAML (``pytest tests/examples --update-goldens`` rewrites
them; review the diff). Host side is real (PostgreSQL, placement, accelerator admission, the wire job
shape); the Grove side is the controller's pure renderer and inventory. No GPU machine is involved.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from forest_agent.kube import inventory
from forest_agent.kube.cli import to_yaml
from forest_agent.kube.controller import VERSION
from forest_agent.kube.render import RenderConfig, render
from forest_agent.kube.spec import CHANGE_KINDS, parse_job
from forest_agent.kube.validate import validate_all

from apps.dispatch.models import GroveJob
from apps.dispatch.selectors import job_wire
from apps.groves import services as grove_services
from apps.pipelines import services
from apps.pipelines.models import PipelineNode
from tests.pipelines.conftest import execute_queued

pytestmark = pytest.mark.django_db

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gpu-smoke"
GROVE_ID = "00000000-0000-4000-8000-00000000cafe"
GPU_NODE = {
    "metadata": {"name": "gpu-node-1", "labels": {
        "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559"}},
    "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "1"},
               "conditions": [{"type": "Ready", "status": "True"}]},
}
# What each step reports (fixed, so the renderings of the later steps are stable).
OUTPUTS = {
    "prepare": {"expected_gpus": 1, "nonce": "0123456789abcdef"},
    "inspect": {"nonce": "0123456789abcdef", "nvidia_smi": ["GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5b4d8d2f)"],
                "nvidia_smi_error": "", "proc_gpus": [{"bus": "0000:17:00.0", "model": "NVIDIA H100 80GB HBM3",
                                                      "uuid": "GPU-5b4d8d2f"}], "visible_devices": "GPU-5b4d8d2f"},
    "evaluate": {},
}



def _job(run, name: str) -> GroveJob:
    return GroveJob.objects.get(node_id=PipelineNode.objects.get(run=run, node_id=name).pk)

def _graph_module():
    spec = importlib.util.spec_from_file_location("gpu_smoke_graph", EXAMPLE / "graph.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_checked_in_graph_is_what_graph_py_builds():
    assert json.loads((EXAMPLE / "graph.json").read_text()) == _graph_module().graph()


def _normalised(job: GroveJob) -> dict:
    """The wire job with this test's random ids replaced by fixed ones (labels carry them)."""
    raw = job_wire(job)
    step_ids = {"prepare": 1, "inspect": 2, "evaluate": 3}
    fixed_job = f"00000000-0000-4000-8000-00000000000{step_ids[raw['node']]}"
    fixed_run = "00000000-0000-4000-8000-0000000000aa"
    text = json.dumps(raw).replace(str(job.pk), fixed_job).replace(str(job.run_id), fixed_run)
    return json.loads(text)


def test_each_step_renders_to_its_golden(enroll, wire, update_goldens):
    grove, credential = enroll(name="gpu-cluster", substrate="kubernetes", roles=("compute",))
    capacity = inventory.capacity([GPU_NODE], [])
    grove = grove_services.grove_heartbeat_record(grove=grove, body={
        "version": VERSION, "change_kinds": list(CHANGE_KINDS), "isolation": ["container"],
        "capacity": capacity, "log_tail": []})
    models = inventory.models_by_inventory_id(capacity)
    run = services.pipeline_run_create(graph=_graph_module().graph(grove=grove.slug), kind="compute")
    grove_wire = wire((grove, credential))
    config = RenderConfig(grove_id=GROVE_ID)
    for name in ("prepare", "inspect", "evaluate"):
        execute_queued(run)
        job = _job(run, name)
        objects = validate_all(render(parse_job(_normalised(job), models=models), config))
        text = to_yaml(objects)
        golden = EXAMPLE / "rendered" / f"{name}.yaml"
        if update_goldens:
            golden.write_text(text)
        assert text == golden.read_text(), f"{name} rendering changed; rerun with --update-goldens and review"
        pod = objects[-1]["spec"]["template"]["spec"]
        assert ("runtimeClassName" in pod) == (name == "inspect")  # only the accelerated step is on a GPU
        grove_wire.run_job(job.pk, outputs=OUTPUTS[name])
        services.pipeline_node_resume(node_id=job.node_id)  # a no-op when the report ran the tail inline
        assert PipelineNode.objects.get(pk=job.node_id).status == "succeeded"
    inspect = _job(run, "inspect")
    assert inspect.payload["accelerator_claim"]["devices"] == [{"inventory_id": "gpu-node-1/nvidia", "count": 1}]
    evaluate = _job(run, "evaluate")
    assert evaluate.payload["needs_outputs"] == {"inspect": OUTPUTS["inspect"], "prepare": OUTPUTS["prepare"]}
    run.refresh_from_db()
    assert run.status == "succeeded"
