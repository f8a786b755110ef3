"""Shapes of the pipelines API. Output serializers render; the run request is declared in ``apps.pipelines.bodies``
(validated by ``apps.pipelines.rules``)."""
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.pipelines.models import PipelineNode, PipelineRun
from apps.pipelines.selectors import node_refusal, queue_positions, run_warnings, runner_status, stored_decisions
from apps.placement.api.serializers import RefusalSerializer  # the one {"code", "detail"} refusal shape


class WarningSerializer(serializers.Serializer):
    code = serializers.CharField()
    detail = serializers.CharField(help_text="why it would have been refused")
    flag = serializers.CharField(help_text="the flag that would refuse it when on")
    grove = serializers.CharField(allow_null=True, help_text="the Grove the work was placed on (null: not placed "
                                                             "yet, a plan-time reason)")


class NodeWarningSerializer(WarningSerializer):
    node = serializers.CharField()


class QueueSerializer(serializers.Serializer):
    position = serializers.IntegerField(allow_null=True, help_text="1 = next to be admitted on that Grove")
    grove = serializers.CharField(allow_null=True, help_text="the Grove whose line it stands earliest in")
    waiting_for = serializers.ListField(child=serializers.CharField(), help_text="every Grove it could fit")
    code = serializers.CharField(help_text="resources_unavailable, accelerator_unavailable, ...")
    detail = serializers.CharField()
    since = serializers.DateTimeField()
    deadline_at = serializers.DateTimeField(help_text="the bounded wait ends timed_out here")
    verdicts = serializers.ListField(child=serializers.DictField())


class DecisionRefSerializer(serializers.Serializer):
    id = serializers.IntegerField(help_text="the stored decision (GET placements/{id})")
    outcome = serializers.CharField()
    code = serializers.CharField()
    summary = serializers.CharField()


class NodeSerializer(serializers.ModelSerializer):
    id = serializers.CharField(source="node_id")
    grove = serializers.SerializerMethodField()
    job_id = serializers.UUIDField(source="current_job_id", allow_null=True)
    job_status = serializers.SerializerMethodField()
    placement_subject = serializers.SerializerMethodField(help_text="subject_type:subject_id of its placement")
    retries = serializers.SerializerMethodField(help_text="retries allowed after the first attempt")
    refusal = serializers.SerializerMethodField(help_text="set when the node was refused before its attempt ran")
    queue = serializers.SerializerMethodField(help_text="set while the node waits for capacity")
    decision = serializers.SerializerMethodField(help_text="its stored refused or waiting decision")

    class Meta:
        model = PipelineNode
        fields = ["id", "kind", "runtime", "status", "reason", "detail", "needs", "node_digest", "reuse", "trust",
                  "timeout_s", "attempt", "retries", "retry_at", "wait_mode", "awaiting_job_id", "seeded_from_run",
                  "dedup_decision", "grove", "job_id", "job_status", "exit_code", "outputs", "plan_warnings",
                  "requirement", "placement_subject", "refusal", "queue", "decision", "finished_at"]

    def get_grove(self, node) -> str | None:
        return node.grove.slug if node.grove_id else None

    @extend_schema_field(RefusalSerializer(allow_null=True))
    def get_refusal(self, node) -> dict | None:
        return node_refusal(node)

    @extend_schema_field(QueueSerializer(allow_null=True))
    def get_queue(self, node) -> dict | None:
        return self.context.get("queue", {}).get(node.pk)

    @extend_schema_field(DecisionRefSerializer(allow_null=True))
    def get_decision(self, node) -> dict | None:
        return self.context.get("decisions", {}).get(node.pk)

    def get_retries(self, node) -> int:
        return node.spec.get("retries", 0)

    def get_placement_subject(self, node) -> str:
        return f"pipeline_node:{node.pk}"

    def get_job_status(self, node) -> str | None:
        return node.current_job.status if node.current_job_id else None


class RunSerializer(serializers.ModelSerializer):
    graph_digest = serializers.CharField(source="graph.digest")

    class Meta:
        model = PipelineRun
        fields = ["id", "kind", "status", "reason", "environment", "team", "build_id", "graph_digest",
                  "created_at", "finished_at"]


class RunnerSerializer(serializers.Serializer):
    queue = serializers.CharField()
    slots = serializers.IntegerField(help_text="runner slots: in-place waits run at most this many at once")
    waiting_in_place = serializers.IntegerField(help_text="nodes waiting in place now, across Host")


class RunDetailSerializer(RunSerializer):
    nodes = serializers.SerializerMethodField()
    runner = serializers.SerializerMethodField()
    warnings = serializers.SerializerMethodField(help_text="what enforcement would have refused (shadow mode)")

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "warnings", "runner", "nodes"]

    @extend_schema_field(NodeWarningSerializer(many=True))
    def get_warnings(self, run) -> list[dict]:
        return run_warnings(list(run.nodes.select_related("current_job").order_by("position")))

    @extend_schema_field(RunnerSerializer)
    def get_runner(self, run) -> dict:
        return runner_status()

    @extend_schema_field(NodeSerializer(many=True))
    def get_nodes(self, run):
        nodes = list(run.nodes.select_related("grove", "current_job").order_by("position"))
        context = {"queue": queue_positions(nodes), "decisions": stored_decisions(nodes)}
        return NodeSerializer(nodes, many=True, context=context).data
