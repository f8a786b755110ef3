"""Shapes of the Grove wire API's responses, for the OpenAPI schema. The request bodies are not here: each is
declared once (``apps.groves.bodies``: enrollment, heartbeat; ``apps.dispatch.bodies``: job report), and its
validation and schema come from that one class."""
from rest_framework import serializers


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


class ReportResponseSerializer(serializers.Serializer):
    job_id = serializers.UUIDField()
    status = serializers.CharField()
    accepted = serializers.BooleanField()


class DataTokenSerializer(serializers.Serializer):
    token = serializers.CharField(help_text="send as 'Authorization: Job <token>' to the blob endpoints")
    expires_at = serializers.DateTimeField(help_text="the job's deadline plus the upload grace")
