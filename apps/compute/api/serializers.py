"""Compute API response shapes, for the OpenAPI schema. The request body is declared in
``apps.compute.bodies``, which validates it too."""
from rest_framework import serializers

from apps.pipelines.api.serializers import DecisionRefSerializer, QueueSerializer, RunnerSerializer, WarningSerializer
from apps.placement.api.serializers import RefusalSerializer


class StepInputSerializer(serializers.Serializer):
    name = serializers.CharField()
    artifact_id = serializers.IntegerField(allow_null=True)
    digest = serializers.CharField(allow_null=True)
    path = serializers.CharField(allow_null=True)

    class Meta:
        # Not "StepInput": that component is the request's declared input (apps.pipelines.bodies), and two
        # components of one name would make the request's $ref point at this response shape.
        ref_name = "ResolvedStepInput"


class StepOutputSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="attempt-N/<output name>")
    artifact_id = serializers.IntegerField()
    digest = serializers.CharField()
    size = serializers.IntegerField(allow_null=True)

    class Meta:
        ref_name = "StoredStepOutput"  # not the request's declared "StepOutput"


class SignalSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="unclaimed")
    detail = serializers.CharField()
    grove = serializers.CharField()
    assigned_for_s = serializers.IntegerField()
    grove_last_poll_age_s = serializers.IntegerField(allow_null=True, help_text="null: the Grove never polled (or, "
                                                     "for an ended job, polled only since)")
    ended_at = serializers.DateTimeField(allow_null=True, help_text="when the unclaimed policy ended the job (null: "
                                                                   "still assigned)")


class StepSerializer(serializers.Serializer):
    name = serializers.CharField()
    status = serializers.CharField()
    grove = serializers.CharField(allow_null=True)
    job_id = serializers.UUIDField(allow_null=True)
    exit_code = serializers.IntegerField(allow_null=True)
    reason = serializers.CharField()
    detail = serializers.CharField()
    refusal = RefusalSerializer(allow_null=True, help_text="set when the step was refused before its attempt ran")
    wait_mode = serializers.CharField(allow_null=True, help_text="in_place (holds a runner slot) or detached")
    attempt = serializers.IntegerField()
    retries = serializers.IntegerField()
    retry_at = serializers.DateTimeField(allow_null=True)
    queue = QueueSerializer(allow_null=True, help_text="set while the step waits for capacity")
    decision = DecisionRefSerializer(allow_null=True, help_text="its stored decision (placed, refused or waiting): "
                                     "`forest placements explain ID`")
    log_tail = serializers.ListField(child=serializers.CharField())
    inputs = StepInputSerializer(many=True, help_text="each input as resolved at submit")
    outputs = StepOutputSerializer(many=True, help_text="the artifacts the step's attempts uploaded")
    signal = SignalSerializer(allow_null=True, help_text="set while the step's job sits assigned and unclaimed past "
                              "GROVE_JOB_UNCLAIMED_AFTER_S (docs/decisions.md \"Unclaimed jobs\")")


class StepWarningSerializer(WarningSerializer):
    step = serializers.CharField()


class ComputeJobSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    run_id = serializers.UUIDField()
    name = serializers.CharField()
    environment = serializers.CharField(allow_null=True, help_text="null when the request named none")
    team = serializers.CharField()
    status = serializers.CharField()
    reason = serializers.CharField()
    created_at = serializers.DateTimeField()
    warnings = StepWarningSerializer(many=True, help_text="what enforcement would have refused (shadow mode)")
    runner = RunnerSerializer()
    steps = StepSerializer(many=True)


class ComputeJobLogSerializer(serializers.Serializer):
    step = serializers.CharField()
    job_id = serializers.UUIDField()
    attempt = serializers.IntegerField()
    grove = serializers.CharField()
    status = serializers.CharField()
    exit_code = serializers.IntegerField(allow_null=True)
    log_tail = serializers.ListField(child=serializers.CharField())
