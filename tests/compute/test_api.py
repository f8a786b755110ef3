"""Compute jobs through the REST API: the flag, request validation codes, the pin, native steps as
native.job work, and a buildless compute run dispatched end to end over the real wire API."""
from __future__ import annotations

import pytest

from apps.compute.models import ComputeJob
from apps.dispatch.models import GroveJob
from apps.groves.models import Grove
from apps.pipelines import services as pipelines
from apps.pipelines.models import PipelineNode
from apps.placement.models import ExecutionPlacement
from tests.pipelines.conftest import WireGrove
from tests.pipelines.graphs import IMAGE

pytestmark = pytest.mark.django_db
URL = "/api/forest/v1/compute/jobs"


@pytest.fixture
def compute_on(flag_on):
    flag_on("host.deploy.forest_compute_jobs")


def _body(**extra):
    return {"name": "train", "steps": [
        {"name": "prep", "kind": "container", "image": IMAGE, "command": ["python", "prep.py"]},
        {"name": "train", "kind": "native", "command": ["./train.sh"], "platform": ["darwin/arm64"]},
    ], **extra}


def _dispatch(job: ComputeJob):
    for node in PipelineNode.objects.filter(run=job.run, status="queued"):
        pipelines.pipeline_node_execute(node_id=node.pk)


def test_flag_off_refuses(staff_client):
    response = staff_client.post(URL, _body(), format="json")
    assert response.status_code == 403 and response.json()["code"] == "compute_jobs_disabled"
    assert staff_client.get(URL).json()["code"] == "compute_jobs_disabled"
    assert not ComputeJob.objects.exists()


def test_needs_a_token(anon_client, compute_on):
    assert anon_client.post(URL, _body(), format="json").status_code == 401


@pytest.mark.parametrize(("mutate", "code", "field"), [
    (lambda b: {**b, "steps": []}, "compute_steps_empty", "steps"),
    (lambda b: {**b, "colour": 1}, "unknown_field", "colour"),
    (lambda b: {**b, "steps": [b["steps"][0], b["steps"][0]]}, "duplicate_step_name", "steps[1].name"),
    (lambda b: {**b, "steps": [{**b["steps"][0], "platform": ["linux/amd65"]}]}, "invalid_platform",
     "steps[0].platform[0]"),
    (lambda b: {**b, "steps": [{**b["steps"][0], "inputs": [{"digest": "sha256:" + "a" * 64}]}]},
     "input_not_found", "steps[0].inputs[0]"),
    (lambda b: {**b, "steps": [{**b["steps"][0], "image": None}]}, "image_required", "steps[0].image"),
    (lambda b: {**b, "steps": [{**b["steps"][1], "image": IMAGE}]}, "image_not_allowed", "steps[0].image"),
    (lambda b: {**b, "steps": [{**b["steps"][0], "name": "Bad Name"}]}, "invalid_step_name", "steps[0].name"),
    (lambda b: {**b, "steps": [{**b["steps"][0], "command": []}]}, "command_required", "steps[0].command"),
    (lambda b: {**b, "steps": [{**b["steps"][0], "extra": 1}]}, "unknown_field", "steps[0].extra"),
    (lambda b: {**b, "steps": [{**b["steps"][0], "retries": 99}]}, "out_of_range", "steps[0].retries"),
    (lambda b: {**b, "steps": [{**b["steps"][0], "backoff": {"delay_s": 1}}]}, "backoff_without_retries",
     "steps[0].backoff"),
])
def test_bad_requests(staff_client, compute_on, mutate, code, field):
    response = staff_client.post(URL, mutate(_body()), format="json")
    assert response.status_code == 400, response.json()
    assert (response.json()["code"], response.json().get("field")) == (code, field)
    assert not ComputeJob.objects.exists()


def test_submit_creates_a_compute_run_with_never_reused_steps(staff_client, compute_on, k8s_grove, native_grove):
    response = staff_client.post(URL, _body(environment="lab"), format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert set(body) >= {"id", "run_id", "status", "steps"}
    assert [s["name"] for s in body["steps"]] == ["prep", "train"]
    assert set(body["steps"][0]) >= {"name", "status", "grove", "job_id", "exit_code"}
    job = ComputeJob.objects.get(pk=body["id"])
    assert job.run.kind == "compute" and job.run.build_id is None
    nodes = {n.node_id: n for n in job.run.nodes.all()}
    assert {n.reuse for n in nodes.values()} == {"never"}
    assert nodes["train"].needs == ["prep"]
    assert nodes["train"].requirement["compatibility"]["change_kind"] == "native.job"
    assert nodes["prep"].requirement["compatibility"]["change_kind"] == "k8s.job"


def test_a_compute_run_dispatches_end_to_end_without_a_build(staff_client, compute_on, k8s_grove, native_grove,
                                                             grove_client):
    body = staff_client.post(URL, _body(), format="json").json()
    job = ComputeJob.objects.get(pk=body["id"])
    kube, mac = (WireGrove(grove_client(cred), grove) for grove, cred in (k8s_grove, native_grove))
    _dispatch(job)
    prep = GroveJob.objects.get(node_id=PipelineNode.objects.get(run=job.run, node_id="prep").pk)
    assert prep.grove_id == kube.grove.id and prep.build_id is None and prep.change_kind == "k8s.job"
    polled = kube.client.get(kube.url("changes?wait=0")).json()["jobs"]
    assert [j["job_id"] for j in polled] == [str(prep.id)]
    kube.run_job(prep.id)
    pipelines.pipeline_node_resume(node_id=prep.node_id)
    _dispatch(job)
    train = GroveJob.objects.get(node_id=PipelineNode.objects.get(run=job.run, node_id="train").pk)
    assert train.grove_id == mac.grove.id and train.change_kind == "native.job" and "image" not in train.payload
    mac.run_job(train.id, outputs={"loss": 0.1})
    pipelines.pipeline_node_resume(node_id=train.node_id)
    detail = staff_client.get(f"{URL}/{job.id}").json()
    assert detail["status"] == "succeeded"
    assert [(s["name"], s["status"], s["grove"], s["exit_code"]) for s in detail["steps"]] == [
        ("prep", "succeeded", "kube", 0), ("train", "succeeded", "mac", 0)]
    assert [j["id"] for j in staff_client.get(URL).json()] == [str(job.id)]


def test_grove_pin_is_validated_and_stored_before_the_run_starts(staff_client, compute_on, k8s_grove, fresh_grove):
    other = fresh_grove(name="other-kube", substrate="kubernetes")
    body = {"name": "pinned", "grove": "other-kube", "steps": [{"name": "a", "image": IMAGE, "command": ["true"]}]}
    response = staff_client.post(URL, body, format="json")
    assert response.status_code == 201, response.json()
    node = PipelineNode.objects.get(run_id=response.json()["run_id"])
    placement = ExecutionPlacement.objects.get(subject_type="pipeline_node", subject_id=str(node.pk))
    assert placement.grove_id == other[0].id
    pipelines.pipeline_node_execute(node_id=node.pk)
    assert GroveJob.objects.get(node_id=node.pk).grove_id == other[0].id
    missing = staff_client.post(URL, {**body, "grove": "nowhere"}, format="json")
    assert missing.status_code == 404 and missing.json()["code"] == "grove_not_found"
    assert missing.json()["field"] == "grove"  # the request's own field, not placement's target.grove_id
    assert ComputeJob.objects.count() == 1


def test_cancel(staff_client, compute_on, k8s_grove):
    body = {"name": "c", "steps": [{"name": "a", "image": IMAGE, "command": ["sleep", "99"]}]}
    job_id = staff_client.post(URL, body, format="json").json()["id"]
    _dispatch(ComputeJob.objects.get(pk=job_id))
    response = staff_client.post(f"{URL}/{job_id}/cancel")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    assert response.json()["steps"][0]["status"] == "cancelled"
    assert staff_client.get(f"{URL}/00000000-0000-0000-0000-000000000000").json()["code"] == "compute_job_not_found"


def test_a_step_with_retries_is_retried_through_the_api_on_its_stored_grove(staff_client, compute_on, k8s_grove,
                                                                           grove_client):
    body = {"name": "flaky", "steps": [{"name": "a", "image": IMAGE, "command": ["true"], "retries": 1,
                                        "backoff": {"delay_s": 0}}]}
    created = staff_client.post(URL, body, format="json").json()
    assert [(s["attempt"], s["retries"], s["retry_at"]) for s in created["steps"]] == [(1, 1, None)]
    job = ComputeJob.objects.get(pk=created["id"])
    kube = WireGrove(grove_client(k8s_grove[1]), k8s_grove[0])
    _dispatch(job)
    node = PipelineNode.objects.get(run=job.run)
    kube.run_job(node.current_job_id, state="failed", exit_code=3)
    pipelines.pipeline_node_resume(node_id=node.pk)
    step = staff_client.get(f"{URL}/{job.id}").json()["steps"][0]
    assert (step["status"], step["attempt"], step["reason"]) == ("queued", 2, "retrying")
    assert step["retry_at"] is not None and step["exit_code"] == 3
    _dispatch(job)
    node.refresh_from_db()
    kube.run_job(node.current_job_id)
    pipelines.pipeline_node_resume(node_id=node.pk)
    detail = staff_client.get(f"{URL}/{job.id}").json()
    assert detail["status"] == "succeeded" and detail["steps"][0]["attempt"] == 2
    assert sorted(GroveJob.objects.filter(node_id=node.pk).values_list("idempotency_key", flat=True)) == [
        f"{job.run_id}:a:1", f"{job.run_id}:a:2"]


def test_status_carries_the_refusal_code_and_detail_of_a_refused_step(staff_client, compute_on, k8s_grove):
    body = {"name": "pinned", "grove": "kube", "steps": [{"name": "a", "image": IMAGE, "command": ["true"]}]}
    job = ComputeJob.objects.get(pk=staff_client.post(URL, body, format="json").json()["id"])
    Grove.objects.filter(slug="kube").update(enabled=False)  # the stored (pinned) Grove goes away
    _dispatch(job)
    step = staff_client.get(f"{URL}/{job.id}").json()["steps"][0]
    assert step["status"] == "failed" and step["job_id"] is None
    assert step["refusal"]["code"] == "placed_grove_gone" == step["reason"]
    assert "disabled" in step["refusal"]["detail"] and step["detail"] == step["refusal"]["detail"]


def test_a_failed_attempt_is_not_a_refusal(staff_client, compute_on, k8s_grove, grove_client):
    body = {"name": "fails", "steps": [{"name": "a", "image": IMAGE, "command": ["false"]}]}
    job = ComputeJob.objects.get(pk=staff_client.post(URL, body, format="json").json()["id"])
    _dispatch(job)
    node = PipelineNode.objects.get(run=job.run)
    WireGrove(grove_client(k8s_grove[1]), k8s_grove[0]).run_job(node.current_job_id, state="failed", exit_code=1)
    pipelines.pipeline_node_resume(node_id=node.pk)
    step = staff_client.get(f"{URL}/{job.id}").json()["steps"][0]
    assert (step["status"], step["exit_code"], step["refusal"]) == ("failed", 1, None)


RISCV = {"name": "riscv", "steps": [{"name": "a", "image": IMAGE, "command": ["true"],
                                     "platform": ["linux/riscv64"]}]}


def test_shadow_mode_says_so_with_warnings_in_the_submit_and_status_responses(staff_client, compute_on, k8s_grove):
    created = staff_client.post(URL, RISCV, format="json")
    assert created.status_code == 201, created.json()
    warnings = created.json()["warnings"]
    assert warnings and {(w["step"], w["flag"]) for w in warnings} == {("a", "host.deploy.forest_compatibility")}
    assert all(w["code"] and w["detail"].endswith(".") for w in warnings)
    job = ComputeJob.objects.get(pk=created.json()["id"])
    _dispatch(job)  # placed anyway (enforcement off): the stored decision says it would refuse
    placement = ExecutionPlacement.objects.get(subject_id=str(PipelineNode.objects.get(run=job.run).pk))
    assert placement.would_refuse
    status = staff_client.get(f"{URL}/{job.id}").json()
    codes = {w["code"] for w in status["warnings"]}
    assert codes >= {item["code"] for item in placement.decision["incompatibilities"]}
    assert len(codes) == len(status["warnings"])  # one warning per reason, not one per source
    plain = {"name": "ok", "steps": [{"name": "a", "image": IMAGE, "command": ["true"]}]}
    assert staff_client.post(URL, plain, format="json").json()["warnings"] == []


def test_shadow_warnings_name_the_grove_the_step_ran_on_and_only_its_decisions_codes(staff_client, compute_on,
                                                                                       k8s_grove, fresh_grove):
    """An unpinned riscv64 step with another Grove in the fleet (not ready, so it has a code of its own at plan
    time): once placed, its warnings are the placed Grove's would-refuse codes, each naming that Grove."""
    fresh_grove(name="pi", substrate="kubernetes", platforms=("linux/arm64",), polled=False)
    created = staff_client.post(URL, RISCV, format="json").json()
    job = ComputeJob.objects.get(pk=created["id"])
    assert "grove_not_polling" in {w["code"] for w in created["warnings"]}, "plan time saw the other Grove"
    assert all(w["grove"] is None for w in created["warnings"]), "not placed yet: no Grove to name"
    _dispatch(job)
    placement = ExecutionPlacement.objects.get(subject_id=str(PipelineNode.objects.get(run=job.run).pk))
    assert placement.would_refuse and placement.grove_slug == "kube"
    warnings = staff_client.get(f"{URL}/{job.id}").json()["warnings"]
    assert {w["code"] for w in warnings} == {i["code"] for i in placement.decision["incompatibilities"]}
    assert warnings and all(w["grove"] == "kube" and "kube" in w["detail"] and "pi" not in w["detail"]
                            for w in warnings), warnings


def test_a_refused_step_has_its_refusal_and_no_would_be_refused_warning(staff_client, compute_on, k8s_grove):
    created = staff_client.post(URL, {**RISCV, "grove": "kube"}, format="json").json()
    assert created["warnings"], "shadow mode warns at plan time"
    job = ComputeJob.objects.get(pk=created["id"])
    Grove.objects.filter(slug="kube").update(enabled=False)  # the pinned Grove goes away: refused at dispatch
    _dispatch(job)
    status = staff_client.get(f"{URL}/{job.id}").json()
    assert status["steps"][0]["refusal"]["code"] == "placed_grove_gone"
    assert status["warnings"] == []


def test_with_enforcement_on_the_same_request_is_refused_and_nothing_is_created(staff_client, compute_on,
                                                                                 k8s_grove, flag_on):
    flag_on("host.deploy.forest_compatibility")
    refused = staff_client.post(URL, RISCV, format="json")
    assert refused.status_code == 400 and refused.json()["code"] == "never_placeable"
    assert not ComputeJob.objects.exists()


def test_a_job_without_environment_answers_null_not_an_empty_string(staff_client, compute_on, k8s_grove):
    """No environment is accepted (the --cmd one-liner sends none) and said as null, never as ``""``."""
    created = staff_client.post(URL, _body(), format="json").json()
    assert created["environment"] is None
    assert staff_client.get(f"{URL}/{created['id']}").json()["environment"] is None
    named = staff_client.post(URL, _body(environment="lab"), format="json").json()
    assert staff_client.get(f"{URL}/{named['id']}").json()["environment"] == "lab"
