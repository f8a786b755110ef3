"""The walk of a compute body from the POST view to the resumed node validates the body once, from its
declaration: ``ComputeJobRequest`` is validated once (each step's rules run once), no hand reader reads the
body or any part of it (``apps.core.validation`` is not entered), the graph the steps make is never parsed
again (``graph_parse``), and nothing downstream (the graph's creation, planning, dispatch, the retry's
re-read of the stored placement, resume) parses it or its stored requirement again
(``ExecutionRequirement.from_stored`` loads what was derived)."""
from __future__ import annotations

import sys
from unittest import mock

import pytest

from apps.compute import bodies as compute_bodies
from apps.compute.models import ComputeJob
from apps.core import validation
from apps.pipelines import bodies as pipeline_bodies
from apps.pipelines import services as pipelines
from apps.pipelines.models import PipelineNode
from apps.placement import requirements
from tests.compute.test_api import URL, _body, _dispatch
from tests.pipelines.conftest import WireGrove

pytestmark = pytest.mark.django_db


def test_a_compute_body_is_validated_once_from_post_to_resumed_node(staff_client, flag_on, k8s_grove, native_grove,
                                                                    grove_client):
    flag_on("host.deploy.forest_compute_jobs")
    body = _body()
    body["steps"][0].update(resources={"cpu_milli": 500, "memory_bytes": 1 << 30}, retries=1,
                            backoff={"delay_s": 0})
    hand_reads: list[str] = []

    def watch(frame, event, arg):
        # Any Python function of the hand readers' module entered while the body is handled.
        if event == "call" and frame.f_code.co_filename == validation.__file__:
            hand_reads.append(frame.f_code.co_name)

    with mock.patch.object(compute_bodies.ComputeJobRequest, "model_validate",
                           wraps=compute_bodies.ComputeJobRequest.model_validate) as requests, \
            mock.patch.object(compute_bodies, "command_rule", wraps=compute_bodies.command_rule) as commands, \
            mock.patch.object(pipeline_bodies, "graph_parse", wraps=pipeline_bodies.graph_parse) as graphs, \
            mock.patch.object(requirements, "parse_requirement",
                              wraps=requirements.parse_requirement) as stored_parses:
        sys.setprofile(watch)
        try:
            response = staff_client.post(URL, body, format="json")
        finally:
            sys.setprofile(None)
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
    assert requests.call_count == 1  # the body validated once, from its declaration
    assert commands.call_count == len(body["steps"])  # each step's rules once
    assert graphs.call_count == 0  # the steps' graph is built from the parsed steps, not parsed as a graph
    assert stored_parses.call_count == 0  # stored requirements load trusted, at every dispatch
    assert hand_reads == [], hand_reads  # no hand reader touched the body on its way to the stored run
