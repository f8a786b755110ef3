from rest_framework import serializers

from apps.workloads.models import NativeWorkload, WorkloadGeneration
from apps.workloads.vocabulary import MAX_STOP_GRACE_S, MIN_STOP_GRACE_S


class GenerationSerializer(serializers.ModelSerializer):
    grove = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = WorkloadGeneration
        fields = ["id", "number", "grove", "spec_digest", "state", "live", "restarts", "probes", "reason",
                  "message", "observed_at", "created_at"]


class NativeWorkloadSerializer(serializers.ModelSerializer):
    bundle_digest = serializers.CharField(source="bundle.digest", read_only=True)
    grove = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    generations = serializers.SerializerMethodField()

    class Meta:
        model = NativeWorkload
        fields = ["slug", "environment", "team", "bundle_digest", "command", "env", "secret_refs", "secrets_mode",
                  "ports", "probes", "ingress", "restart", "platform", "resources", "grove", "stop_grace_s",
                  "generations", "updated_at"]

    def get_generations(self, obj) -> list[dict]:
        return GenerationSerializer(obj.generations.all()[:5], many=True).data


class NativeWorkloadRequestSerializer(serializers.Serializer):
    """Describes the request body for the schema; validation is ``apps.workloads.rules.workload_spec``."""

    slug = serializers.SlugField()
    environment = serializers.CharField(required=False)
    team = serializers.CharField(required=False)
    bundle_digest = serializers.CharField()
    command = serializers.ListField(child=serializers.CharField())
    env = serializers.DictField(child=serializers.CharField(), required=False)
    secret_refs = serializers.ListField(child=serializers.CharField(), required=False)
    secrets_mode = serializers.ChoiceField(choices=["env", "file"], required=False)
    ports = serializers.ListField(child=serializers.DictField(), required=False)
    probes = serializers.DictField(required=False)
    ingress = serializers.DictField(required=False, allow_null=True)
    restart = serializers.DictField(required=False)
    platform = serializers.ListField(child=serializers.CharField(), required=False)
    resources = serializers.DictField(required=False)
    grove = serializers.CharField(required=False)
    stop_grace_s = serializers.IntegerField(
        required=False, allow_null=True, min_value=MIN_STOP_GRACE_S, max_value=MAX_STOP_GRACE_S,
        help_text="Seconds between SIGTERM and SIGKILL when its agent stops the workload's process group; "
                  "absent or null: the agent's --kill-grace. Changing it writes a new generation.")


class SecretRequestSerializer(serializers.Serializer):
    # Bounded like the columns they land in: a longer value is a 400, never a database error.
    team = serializers.CharField(required=False, allow_blank=True, max_length=100)
    environment = serializers.CharField(required=False, max_length=100)
    name = serializers.CharField(max_length=100)
    value = serializers.CharField(max_length=64 * 1024)
