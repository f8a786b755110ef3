"""Runs, nodes, GRAPH_DEDUP, the exec driver, a node's job claimed and reported (the dispatch services' own
refusals are tests/dispatch/test_services.py), waiting modes, the sweep and cancellation, through the services
and the real wire API on PostgreSQL (placement is the real apps.placement)."""
from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from apps.accounts.roles import SUBMITTER, VIEWER
from apps.artifacts.services import artifact_blob_create
from apps.core.errors import ForestError, ValidationFailed
from apps.dispatch import services as dispatch_services
from apps.dispatch.models import GroveJob
from apps.pipelines import services
from apps.pipelines.models import PipelineGraph, PipelineNode, PipelineNodeEvent, PipelineOutbox, PipelineRun
from apps.placement.models import ExecutionPlacement
from tests.factories import UserFactory, grant
from tests.pipelines.conftest import execute_queued
from tests.pipelines.graphs import IMAGE, exec_node, graph

pytestmark = pytest.mark.django_db


def _run(nodes, *, kind="compute", environment="", **extra):
    return services.pipeline_run_create(graph=graph(*nodes), kind=kind, environment=environment, **extra)


def _node(run, node_id) -> PipelineNode:
    return PipelineNode.objects.get(run=run, node_id=node_id)


def _succeeded_tails(node) -> int:
    return PipelineNodeEvent.objects.filter(node=node, to_status="succeeded").count()


# --- runs and nodes -------------------------------------------------------------------------------

def test_two_runs_of_one_graph_share_the_graph_but_never_node_rows(k8s_grove):
    nodes = [exec_node("prep", reuse="never"), exec_node("train", needs=["prep"], reuse="never")]
    one, two = _run(nodes), _run(nodes)
    assert one.graph_id == two.graph_id and PipelineGraph.objects.count() == 1
    assert one.nodes.count() == two.nodes.count() == 2
    assert not set(one.nodes.values_list("pk", flat=True)) & set(two.nodes.values_list("pk", flat=True))
    # Only the root is queued; its successor waits for it.
    assert {n.node_id: n.status for n in one.nodes.all()} == {"prep": "queued", "train": "pending"}
    execute_queued(one)
    execute_queued(two)
    job_one, job_two = GroveJob.objects.get(run_id=one.id), GroveJob.objects.get(run_id=two.id)
    assert job_one.idempotency_key == f"{one.id}:prep:1" and job_two.idempotency_key == f"{two.id}:prep:1"
    assert job_one.payload["run_id"] == str(one.id) and job_two.payload["run_id"] == str(two.id)
    assert job_one.build_id is None  # a compute run has no build, and dispatch does not need one


def test_planner_orders_nodes_and_stores_each_requirement(k8s_grove, native_grove):
    run = _run([exec_node("eval", needs=["train"]), exec_node("train", runtime="native"), exec_node("a")])
    rows = list(run.nodes.order_by("position"))
    assert [n.node_id for n in rows] == ["a", "train", "eval"]
    train = _node(run, "train")
    assert train.requirement["compatibility"]["change_kind"] == "native.job"
    assert train.requirement["family"] == "compute"
    assert _node(run, "a").requirement["compatibility"]["change_kind"] == "k8s.job"


def test_never_placeable_is_a_warning_with_the_flag_off_and_a_refusal_with_it_on(k8s_grove, flag_on):
    riscv = [exec_node("a", platform=["linux/riscv64"])]
    run = _run(riscv)
    assert _node(run, "a").plan_warnings, "the reasons are kept on the node"
    flag_on("host.deploy.forest_compatibility")
    with pytest.raises(ValidationFailed) as info:
        _run(riscv)
    assert info.value.code == "never_placeable"


def test_placement_refusal_fails_the_node_with_its_code_and_skips_successors(k8s_grove, flag_on):
    run = _run([exec_node("a", platform=["linux/riscv64"]), exec_node("b", needs=["a"])])
    flag_on("host.deploy.forest_compatibility")
    assert execute_queued(run) == [None]
    a, b = _node(run, "a"), _node(run, "b")
    assert a.status == "failed" and a.reason in {"placement_refused", "no_eligible_grove"}
    assert b.status == "skipped"
    run.refresh_from_db()
    assert run.status == "failed"


def test_node_is_placed_through_placement_with_subject_pipeline_node(k8s_grove):
    run = _run([exec_node("a")])
    execute_queued(run)
    node = _node(run, "a")
    placement = ExecutionPlacement.objects.get(subject_type="pipeline_node", subject_id=str(node.pk))
    assert placement.grove_id == k8s_grove[0].id == node.current_job.grove_id
    # A re-delivered execute message does nothing: the node is no longer queued.
    assert services.pipeline_node_execute(node_id=node.pk) is None
    assert GroveJob.objects.filter(node_id=node.pk).count() == 1


def test_pinned_and_unpinned_nodes_record_the_runs_team_and_environment(k8s_grove):
    run = _run([exec_node("pinned", grove="kube"), exec_node("free")], environment="prod", team="ml")
    pinned = ExecutionPlacement.objects.get(subject_type="pipeline_node", subject_id=str(_node(run, "pinned").pk))
    # The pin is stored when the run is created, before any node runs: it already carries the scope.
    assert (pinned.chooser, pinned.team, pinned.environment) == ("explicit", "ml", "prod")
    execute_queued(run)
    rows = ExecutionPlacement.objects.filter(subject_type="pipeline_node").order_by("id")  # the pin first
    assert [(row.chooser, row.team, row.environment) for row in rows] == [
        ("explicit", "ml", "prod"), ("selection", "ml", "prod")]
    assert {node.status for node in run.nodes.all()} == {"awaiting"}


# --- GRAPH_DEDUP ----------------------------------------------------------------------------------

def _finish(run, wire_grove, node_id="a"):
    execute_queued(run)
    node = _node(run, node_id)
    wire_grove.run_job(node.current_job_id, outputs={"image": "done"})
    services.pipeline_node_resume(node_id=node.pk)


def test_eligible_node_is_seeded_from_an_earlier_success_and_records_the_run(k8s_grove, wire):
    first = _run([exec_node("a")])
    _finish(first, wire(k8s_grove))
    second = _run([exec_node("a")])
    node = _node(second, "a")
    assert node.status == "succeeded" and node.seeded_from_run_id == first.id
    assert node.dedup_decision == "seeded" and node.outputs == {"image": "done"}
    assert not GroveJob.objects.filter(run_id=second.id).exists()
    second.refresh_from_db()
    assert second.status == "succeeded"
    # Seeded from a seeded node: the record names the run that really did the work.
    third = _run([exec_node("a")])
    assert _node(third, "a").seeded_from_run_id == first.id


@pytest.mark.parametrize(("extra", "exclusion"), [
    ({"runtime": "native", "image": None}, "host_command"),
    ({"trust": "untrusted"}, "untrusted"),
    ({"reuse": "never"}, "reuse_never"),
    ({"image": "python:3.12"}, "image_not_pinned"),
    ({"inputs": "a CAS blob"}, "input_not_oci"),
])
def test_ineligible_nodes_never_inherit(k8s_grove, native_grove, wire, extra, exclusion):
    if extra.get("inputs"):
        blob = artifact_blob_create(chunks=[b"a blob, not an image"], reference="objects/x")
        extra = {"inputs": [{"digest": blob.digest, "storage_kind": "cas", "ref": "objects/x"}]}
    spec = exec_node("a", **extra)
    grove = native_grove if extra.get("runtime") == "native" else k8s_grove
    first = _run([spec])
    _finish(first, wire(grove))
    assert _node(first, "a").status == "succeeded"
    second = _run([spec])
    node = _node(second, "a")
    assert node.status == "queued" and node.seeded_from_run_id is None
    assert node.dedup_decision == f"excluded:{exclusion}"


def test_a_failed_earlier_run_is_never_inherited(k8s_grove, wire):
    first = _run([exec_node("a")])
    execute_queued(first)
    wire(k8s_grove).run_job(_node(first, "a").current_job_id, state="failed", exit_code=1)
    services.pipeline_node_resume(node_id=_node(first, "a").pk)
    assert _node(_run([exec_node("a")]), "a").dedup_decision == "no_earlier_success"


# --- claim and report -----------------------------------------------------------------------------

@pytest.mark.usefixtures("celery_tail")
def test_claim_report_and_resume_run_the_tail_once_and_schedule_successors(k8s_grove, wire):
    run = _run([exec_node("a", reuse="never"), exec_node("b", needs=["a"], reuse="never")])
    execute_queued(run)
    grove = wire(k8s_grove)
    job_id = _node(run, "a").current_job_id
    assert grove.claim(job_id).json()["job"]["idempotency_key"] == f"{run.id}:a:1"
    again = grove.claim(job_id)
    assert again.status_code == 409 and again.json()["code"] == "already_claimed"
    assert grove.report(job_id, state="running", log_tail=["x"]).json() == {
        "job_id": str(job_id), "status": "running", "accepted": True}
    body = grove.report(job_id, state="succeeded", exit_code=0, outputs={"k": 1}).json()
    assert body["accepted"] is True and body["status"] == "succeeded"
    repeat = grove.report(job_id, state="succeeded", exit_code=0).json()
    assert repeat["accepted"] is False
    assert PipelineOutbox.objects.filter(node=_node(run, "a")).count() == 1
    assert services.pipeline_node_resume(node_id=_node(run, "a").pk) is True
    assert services.pipeline_node_resume(node_id=_node(run, "a").pk) is False
    a = _node(run, "a")
    assert a.status == "succeeded" and a.outputs == {"k": 1} and a.exit_code == 0 and _succeeded_tails(a) == 1
    assert not PipelineOutbox.objects.filter(node=a, done_at__isnull=True).exists()
    assert _node(run, "b").status == "queued"


# --- detached and in-place waiting ----------------------------------------------------------------

def test_flag_off_waits_in_place(k8s_grove, settings):
    settings.PIPELINE_DETACHED_WAIT_ENVIRONMENT_IDS = ["prod"]
    run = _run([exec_node("a")], environment="prod")
    assert execute_queued(run) == ["in_place"]
    node = _node(run, "a")
    assert node.wait_mode == "in_place" and node.awaiting_job_id is None and node.reason == "wait_in_place:flag_off"


def test_flag_on_and_environment_listed_detaches(k8s_grove, detached):
    run = _run([exec_node("a")], environment="prod")
    assert execute_queued(run) == ["detached"]
    node = _node(run, "a")
    assert node.wait_mode == "detached" and node.awaiting_job_id == node.current_job_id


def test_flag_on_but_environment_not_listed_waits_in_place(k8s_grove, detached):
    run = _run([exec_node("a")], environment="staging")
    assert execute_queued(run) == ["in_place"]
    assert _node(run, "a").reason == "wait_in_place:environment_not_listed"


def test_flag_on_but_ineligible_steps_wait_in_place(k8s_grove, native_grove, detached):
    run = _run([exec_node("n", runtime="native")], environment="prod")
    assert execute_queued(run) == ["in_place"]
    assert _node(run, "n").reason == "wait_in_place:native_step"


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("celery_tail")
def test_in_place_wait_runs_the_same_tail_when_the_job_ends(k8s_grove, wire):
    run = _run([exec_node("a", reuse="never")])
    execute_queued(run)
    node = _node(run, "a")
    outcome = {}

    def waiter():
        try:
            outcome["ran"] = services.pipeline_node_wait_in_place(node_id=node.pk, poll_s=0.05, max_wait_s=20)
        finally:
            connection.close()

    thread = threading.Thread(target=waiter)
    thread.start()
    wire(k8s_grove).run_job(node.current_job_id, state="failed", exit_code=3)
    thread.join(30)
    node.refresh_from_db()
    assert outcome == {"ran": True}
    assert node.status == "failed" and node.exit_code == 3
    run.refresh_from_db()
    assert run.status == "failed"
    # The resume message the report queued finds nothing left to do.
    assert services.pipeline_node_resume(node_id=node.pk) is False


# --- sweep ----------------------------------------------------------------------------------------

@pytest.mark.usefixtures("celery_tail")
def test_sweep_resends_due_resumes_only(k8s_grove, wire, detached):
    run = _run([exec_node("a")], environment="prod")
    execute_queued(run)
    wire(k8s_grove).run_job(_node(run, "a").current_job_id)
    row = PipelineOutbox.objects.get(node=_node(run, "a"))
    assert services.pipeline_sweep()["resent"] == 0  # not due yet: the first send was just made
    counts = services.pipeline_sweep(now=timezone.now() + timedelta(minutes=5))
    row.refresh_from_db()
    assert counts["resent"] == 1 and row.sends == 2 and row.next_send_at > timezone.now() + timedelta(minutes=5)


@pytest.mark.usefixtures("celery_tail")
def test_sweep_resumes_a_node_whose_job_ended_by_another_path(k8s_grove, detached):
    run = _run([exec_node("a")], environment="prod")
    execute_queued(run)
    GroveJob.objects.filter(run_id=run.id).update(status="succeeded", exit_code=0)  # e.g. fixed by hand in admin
    assert services.pipeline_sweep()["orphans"] == 1
    assert services.pipeline_sweep()["orphans"] == 0  # a resume is now pending; not written twice
    services.pipeline_node_resume(node_id=_node(run, "a").pk)
    assert _node(run, "a").status == "succeeded"


def test_sweep_times_out_overdue_jobs_and_a_late_report_does_not_revive(k8s_grove, wire, detached):
    run = _run([exec_node("a", timeout_s=60)], environment="prod")
    execute_queued(run)
    grove = wire(k8s_grove)
    job_id = _node(run, "a").current_job_id
    grove.claim(job_id)
    assert services.pipeline_sweep(now=timezone.now() + timedelta(seconds=30))["timed_out"] == 0
    assert services.pipeline_sweep(now=timezone.now() + timedelta(hours=1))["timed_out"] == 1
    job = GroveJob.objects.get(pk=job_id)
    assert job.status == "timed_out" and job.reason == "deadline_exceeded"
    services.pipeline_node_resume(node_id=_node(run, "a").pk)
    assert _node(run, "a").status == "timed_out"
    # The Grove is told to stop it, and a late success is stored but changes nothing.
    assert str(job_id) in grove.client.get(grove.url("changes?wait=0")).json()["cancel"]
    late = grove.report(job_id, state="succeeded", exit_code=0).json()
    assert late["accepted"] is False and late["status"] == "timed_out"
    job.refresh_from_db()
    assert job.late_report["state"] == "succeeded" and job.cancel_acked_at is not None
    assert _node(run, "a").status == "timed_out"


# --- cancellation ---------------------------------------------------------------------------------

def test_cancel_while_running_tells_the_grove_and_a_late_success_never_revives(k8s_grove, wire, detached):
    run = _run([exec_node("a"), exec_node("b", needs=["a"])], environment="prod")
    execute_queued(run)
    grove = wire(k8s_grove)
    job_id = _node(run, "a").current_job_id
    grove.claim(job_id)
    grove.report(job_id, state="running")
    services.pipeline_run_cancel(run_id=run.id)
    run.refresh_from_db()
    assert run.status == "cancelled"
    a = _node(run, "a")
    assert a.status == "cancelled" and a.awaiting_job_id is None
    assert _node(run, "b").status == "cancelled"
    changes = grove.client.get(grove.url("changes?wait=0")).json()
    assert changes["cancel"] == [str(job_id)] and changes["jobs"] == []
    late = grove.report(job_id, state="succeeded", exit_code=0).json()
    assert late == {"job_id": str(job_id), "status": "cancelled", "accepted": False}
    assert GroveJob.objects.get(pk=job_id).late_report["state"] == "succeeded"
    assert services.pipeline_node_resume(node_id=a.pk) is False
    assert _node(run, "a").status == "cancelled"
    # Acknowledged by that report: the next poll no longer lists it.
    assert grove.client.get(grove.url("changes?wait=0")).json()["cancel"] == []


def test_cancel_touches_only_its_own_run(k8s_grove):
    nodes = [exec_node("a", reuse="never")]
    one, two = _run(nodes), _run(nodes)
    execute_queued(one)
    execute_queued(two)
    services.pipeline_run_cancel(run_id=one.id)
    assert GroveJob.objects.get(run_id=one.id).status == "cancelled"
    assert GroveJob.objects.get(run_id=two.id).status == "assigned"
    # Never claimed: nothing for the Grove to stop, so it is not listed in ``cancel``.
    assert GroveJob.objects.get(run_id=one.id).cancel_acked_at is not None


def test_grove_job_cancel_ends_the_node_through_the_tail(k8s_grove, wire):
    run = _run([exec_node("a")])
    execute_queued(run)
    job_id = _node(run, "a").current_job_id
    wire(k8s_grove).claim(job_id)
    assert dispatch_services.grove_job_cancel(job_id=str(job_id), reason="accelerator_budget_exhausted") is True
    assert dispatch_services.grove_job_cancel(job_id=str(job_id), reason="accelerator_budget_exhausted") is False
    services.pipeline_node_resume(node_id=_node(run, "a").pk)
    node = _node(run, "a")
    assert node.status == "cancelled" and node.reason == "accelerator_budget_exhausted"
    run.refresh_from_db()
    assert run.status == "failed"


def test_illegal_node_transition_raises(k8s_grove):
    run = _run([exec_node("a")])
    node = _node(run, "a")
    with pytest.raises(Exception) as info:
        services.node_transition(node=node, to="succeeded")
    assert getattr(info.value, "code", None) == "illegal_transition"


def test_image_is_carried_into_the_job_payload(k8s_grove):
    run = _run([exec_node("a", env={"K": "v"}, timeout_s=120)])
    execute_queued(run)
    payload = GroveJob.objects.get(run_id=run.id).payload
    assert payload["image"] == IMAGE and payload["env"] == {"K": "v"} and payload["timeout_s"] == 120
    assert payload["command"][0] == "python" and payload["node"] == "a"


def test_nodes_ready_together_are_placed_as_one_batch_and_dispatch_rereads_them(k8s_grove):
    run = _run([exec_node("a", reuse="never"), exec_node("b", reuse="never"), exec_node("c", reuse="never"),
                exec_node("d", needs=["a"], reuse="never")])
    placements = {p.subject_id: p for p in ExecutionPlacement.objects.all()}
    ready = {str(_node(run, n).pk) for n in ("a", "b", "c")}
    assert set(placements) == ready  # placed when they became ready, before any node_execute ran
    assert {p.verdicts_key for p in placements.values()} != {""}
    execute_queued(run)
    assert ExecutionPlacement.objects.count() == 3  # dispatch re-read each one
    for node_id in ("a", "b", "c"):
        node = _node(run, node_id)
        assert node.current_job.grove_id == placements[str(node.pk)].grove_id


def test_the_cancel_service_itself_demands_the_change_permission(k8s_grove):
    """Every door checks before it calls, so only a call of the service as a viewer shows that the service's
    own check is the change permission (a door added later that forgets its check is still refused)."""
    run = _run([exec_node("a")], team="red")
    viewer = grant(UserFactory(), VIEWER, teams=("red",))
    with pytest.raises(ForestError) as refused:
        services.pipeline_run_cancel_as(actor=viewer, run_id=run.id)
    assert (refused.value.code, refused.value.status) == ("permission_required", 403)
    assert PipelineRun.objects.get(pk=run.pk).status == "running"
    outsider = grant(UserFactory(), SUBMITTER, teams=("blue",))
    with pytest.raises(ForestError) as refused:
        services.pipeline_run_cancel_as(actor=outsider, run_id=run.id)
    assert refused.value.code == "team_forbidden"
    submitter = grant(UserFactory(), SUBMITTER, teams=("red",))
    assert services.pipeline_run_cancel_as(actor=submitter, run_id=run.id).status == "cancelled"
