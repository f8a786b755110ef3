"""The walk of a compute body from the POST view to the resumed node parses the body once: each step goes
through the node parser once, its resources object is read once, and nothing downstream (the graph's
creation, planning, dispatch, the retry's re-read of the stored placement, resume) parses it or its
stored requirement again (``ExecutionRequirement.from_stored`` loads what was derived)."""
from __future__ import annotations

from collections import Counter
from unittest import mock

import pytest

from apps.compute.models import ComputeJob
from apps.core import validation
from apps.pipelines import rules as pipeline_rules
from apps.pipelines import services as pipelines
from apps.pipelines.models import PipelineNode
from apps.placement import requirements
from tests.compute.test_api import URL, _body, _dispatch
from tests.pipelines.conftest import WireGrove

pytestmark = pytest.mark.django_db


def test_a_compute_body_is_parsed_once_from_post_to_resumed_node(staff_client, flag_on, k8s_grove, native_grove,
                                                                grove_client):
    flag_on("host.deploy.forest_compute_jobs")
    body = _body()
    body["steps"][0].update(resources={"cpu_milli": 500, "memory_bytes": 1 << 30}, retries=1,
                            backoff={"delay_s": 0})
    reads: Counter[str] = Counter()
    real_obj = validation.obj

    def obj(value, field, **kwargs):
        reads[field] += 1
        return real_obj(value, field, **kwargs)

    with mock.patch.object(validation, "obj", side_effect=obj), \
            mock.patch.object(pipeline_rules, "node_parse", wraps=pipeline_rules.node_parse) as nodes, \
            mock.patch.object(pipeline_rules, "graph_validate", wraps=pipeline_rules.graph_validate) as graphs, \
            mock.patch.object(requirements, "parse_requirement",
                              wraps=requirements.parse_requirement) as stored_parses:
        response = staff_client.post(URL, body, format="json")
        assert response.status_code == 201, response.json()
        job = ComputeJob.objects.get(pk=response.json()["id"])
        kube, mac = (WireGrove(grove_client(cred), grove) for grove, cred in (k8s_grove, native_grove))
        _dispatch(job)
        prep = PipelineNode.objects.get(run=job.run, node_id="prep")
        kube.run_job(prep.current_job_id, state="failed", exit_code=1)  # a retry re-reads its stored placement
        pipelines.pipeline_node_resume(node_id=prep.pk)
        _dispatch(job)
        prep.refresh_from_db()
        kube.run_job(prep.current_job_id)
        pipelines.pipeline_node_resume(node_id=prep.pk)
        _dispatch(job)
        train = PipelineNode.objects.get(run=job.run, node_id="train")
        mac.run_job(train.current_job_id)
        pipelines.pipeline_node_resume(node_id=train.pk)

    job.run.refresh_from_db()
    assert job.run.status == "succeeded"
    assert nodes.call_count == len(body["steps"])  # each step through the node parser once
    assert graphs.call_count == 0  # the steps' graph is built from parsed nodes, not parsed as a graph
    assert stored_parses.call_count == 0  # stored requirements load trusted, at every dispatch
    body_reads = {field: n for field, n in reads.items() if field.startswith("steps")}
    assert body_reads and set(body_reads.values()) == {1}, body_reads
    assert body_reads["steps[0].resources"] == 1
    # Derivation builds the requirement from the parsed node: the requirement reader never runs.
    assert not {"resources", "compatibility", "accelerators"} & set(reads), reads
