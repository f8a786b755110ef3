from rest_framework import serializers

from apps.ingress.models import IngressRoute


class IngressRouteSerializer(serializers.ModelSerializer):
    grove = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    workload = serializers.CharField(source="workload_slug", read_only=True)
    upstream = serializers.CharField(read_only=True)

    class Meta:
        model = IngressRoute
        fields = ["hostname", "path_prefix", "workload", "team", "environment", "grove", "upstream", "state",
                  "last_error", "state_changed_at", "rendered_at", "created_at"]


class IngressRouteListSerializer(serializers.Serializer):
    enabled = serializers.BooleanField(help_text="host.deploy.native_ingress, globally")
    reason = serializers.CharField(help_text="why nothing is rendered, when the flag is off")
    results = IngressRouteSerializer(many=True)
