"""Step data through the Kubernetes controller: the lineage example's two jobs as container steps on a
live Host, a real Celery worker and the real ``forest-controller`` process, against the fake Kubernetes
API server (``agent/tests/kube_fake.py``).

What is faked, and why: no Kubernetes API server can run here. The fake's test kubelet runs the pod's
containers as local processes, in order: the ``fetch-inputs`` init container, the step, and the
``upload-outputs`` container, each volume one shared local directory (its ``mountPath`` rewritten in
commands and environment), the data token read from the Secret the controller applied. So the real
fetch and upload code (``forest_agent.data``) talks to the live Host with the job's data token; the
images are not pulled and nothing is isolated. Everything on the Host side is real."""
from __future__ import annotations

import importlib.util
import os
import sys

import pytest

from apps.artifacts.models import ArtifactUse
from apps.artifacts.selectors import artifact_lineage
from apps.compute.services import compute_job_submit
from tests.e2e.test_kube_controller import IMAGE, ROOT, _terminal, cluster, compute_on, controller  # noqa: F401

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e, pytest.mark.slow]


def _jobs():
    spec = importlib.util.spec_from_file_location("lineage_jobs", ROOT / "examples/lineage/jobs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_lineage_example_runs_through_the_controller(controller, cluster, worker, compute_on):  # noqa: F811
    grove, output = controller
    fake, kubelet = cluster
    kubelet.extra_env = lambda pod: {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    worker()
    jobs = _jobs()
    first = compute_job_submit(body=jobs.writer(grove=grove.slug, kind="container", image=IMAGE))
    done = _terminal(first.run, "write")
    assert done.status == "succeeded", (done.reason, done.log_tail, output())
    produced = {use.name: use.artifact for use in ArtifactUse.objects.filter(run_id=first.run_id, role="output")}
    result = produced["attempt-1/result"]
    assert result.size == 10000 and result.producing_node == "write"
    (k8s_job,) = fake.list("Job")
    pod = k8s_job["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["step"]  # no inputs: no fetch
    assert [c["name"] for c in pod["containers"]] == ["upload-outputs"]
    secret = fake.get("Secret", "forest", f"{k8s_job['metadata']['name']}-data")
    assert secret["metadata"]["ownerReferences"][0]["name"] == k8s_job["metadata"]["name"]
    assert "fgc_" not in str(pod) and "fgc_" not in secret["stringData"]["token"]  # never the Grove's credential

    second = compute_job_submit(body=jobs.checker(grove=grove.slug, kind="container", image=IMAGE,
                                                  artifact_id=result.pk, digest=result.digest))
    checked = _terminal(second.run, "check")
    assert checked.status == "succeeded", (checked.reason, checked.log_tail, output())
    assert any("input verified" in line for line in checked.log_tail)
    lineage = artifact_lineage(artifact=result)
    assert [c["run_id"] for c in lineage["consumers"]] == [str(second.run_id)]


def test_a_missing_output_fails_the_step_with_output_missing(controller, cluster, worker, compute_on):  # noqa: F811
    grove, output = controller
    _, kubelet = cluster
    kubelet.extra_env = lambda pod: {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    worker()
    job = compute_job_submit(body={"name": "forgets", "grove": grove.slug, "steps": [{
        "name": "forgets", "kind": "container", "image": IMAGE, "command": [sys.executable, "-c", "print(1)"],
        "outputs": [{"name": "model", "path": "model.bin"}]}]})
    done = _terminal(job.run, "forgets")
    assert (done.status, done.reason) == ("failed", "output_missing"), (done.log_tail, output())
    assert not ArtifactUse.objects.filter(run_id=job.run_id).exists()
