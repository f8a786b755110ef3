"""Shapes of the Grove wire API, for the OpenAPI schema. Bodies are validated by ``apps.groves.rules`` and
``apps.dispatch.rules`` (fast, exact field paths); these serializers only describe them. The heartbeat body
is not here: it is declared once, in ``apps.groves.bodies`` (validation and schema from one class)."""
from rest_framework import serializers

from apps.dispatch.vocabulary import REPORT_STATES
from apps.groves.choices import (
    Substrate,
)


class EnrollRequestSerializer(serializers.Serializer):
    token = serializers.CharField()
    name = serializers.CharField(max_length=200)
    substrate = serializers.ChoiceField(choices=Substrate.choices)
    platforms = serializers.ListField(child=serializers.CharField(), min_length=1, max_length=32)
    version = serializers.CharField(required=False, allow_blank=True, max_length=100)


class EnrollResponseSerializer(serializers.Serializer):
    grove_id = serializers.UUIDField()
    credential = serializers.CharField()


class HeartbeatResponseSerializer(serializers.Serializer):
    server_time = serializers.DateTimeField()
    stale_after_s = serializers.IntegerField()


class JobPayloadSerializer(serializers.Serializer):
    command = serializers.ListField(child=serializers.CharField())
    image = serializers.CharField(required=False)
    env = serializers.DictField(child=serializers.CharField())
    timeout_s = serializers.IntegerField()


class WireJobSerializer(serializers.Serializer):
    job_id = serializers.UUIDField()
    run_id = serializers.UUIDField()
    node = serializers.CharField()
    change_kind = serializers.CharField()
    idempotency_key = serializers.CharField(help_text="run:node:attempt")
    payload = JobPayloadSerializer()


class ChangesSerializer(serializers.Serializer):
    jobs = WireJobSerializer(many=True)
    workloads = serializers.ListField(child=serializers.DictField())
    cancel = serializers.ListField(child=serializers.UUIDField())


class ClaimResponseSerializer(serializers.Serializer):
    job = WireJobSerializer()


class ReportRequestSerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=REPORT_STATES)
    exit_code = serializers.IntegerField(required=False, min_value=-255, max_value=255)
    log_tail = serializers.ListField(child=serializers.CharField(allow_blank=True), required=False)
    outputs = serializers.DictField(required=False)
    reason = serializers.CharField(required=False)


class ReportResponseSerializer(serializers.Serializer):
    job_id = serializers.UUIDField()
    status = serializers.CharField()
    accepted = serializers.BooleanField()


class DataTokenSerializer(serializers.Serializer):
    token = serializers.CharField(help_text="send as 'Authorization: Job <token>' to the blob endpoints")
    expires_at = serializers.DateTimeField(help_text="the job's deadline plus the upload grace")
