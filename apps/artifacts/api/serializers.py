from rest_framework import serializers

from apps.artifacts.models import Artifact, ArtifactPlatformCheck


class ArtifactPlatformCheckSerializer(serializers.ModelSerializer):
    grove = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = ArtifactPlatformCheck
        fields = ["id", "subject_type", "subject_id", "grove", "required", "artifact_platform", "verdict",
                  "enforced", "code", "detail", "created_at"]


class ArtifactSerializer(serializers.ModelSerializer):
    # null for what Host recorded itself (a step's outputs, a pushed image) or whose uploader is gone.
    uploaded_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = Artifact
        fields = ["id", "digest", "storage_kind", "reference", "media_type", "size", "platform", "platform_status",
                  "platform_source", "signature", "signing_key_id", "producing_run_id", "producing_node",
                  "producing_name", "team", "uploaded_by", "created_at"]


class ArtifactDetailSerializer(ArtifactSerializer):
    platform_checks = ArtifactPlatformCheckSerializer(many=True, read_only=True)

    class Meta(ArtifactSerializer.Meta):
        fields = [*ArtifactSerializer.Meta.fields, "platform_checks"]


class ImportRequestSerializer(serializers.Serializer):
    reference = serializers.CharField(max_length=500, help_text="registry/repository[:tag][@sha256:...]")
    grove = serializers.CharField(max_length=100, help_text="destination Grove (id or slug)")


class ImportResponseSerializer(serializers.Serializer):
    artifact = ArtifactSerializer()
    index_digest = serializers.CharField(allow_blank=True, help_text="the index resolved, if the image was one")
    matched = serializers.CharField(allow_blank=True, help_text="grove:<platform> or fallback:<platform>")
    offered = serializers.ListField(child=serializers.CharField())
    check = ArtifactPlatformCheckSerializer()


class GcRequestSerializer(serializers.Serializer):
    dry_run = serializers.BooleanField(default=False)


class GcReportSerializer(serializers.Serializer):
    backend = serializers.CharField()
    examined = serializers.IntegerField()
    removed = serializers.IntegerField()
    kept = serializers.IntegerField()
    staging_removed = serializers.IntegerField()
    dry_run = serializers.BooleanField()
    skipped = serializers.CharField(allow_blank=True, help_text="a code when GC skipped (cas_bucket_missing)")


class ArtifactSummarySerializer(serializers.Serializer):
    id = serializers.IntegerField()
    digest = serializers.CharField()
    storage_kind = serializers.CharField()
    reference = serializers.CharField()
    size = serializers.IntegerField(allow_null=True)
    platform = serializers.CharField(allow_blank=True)
    producing_run_id = serializers.CharField(allow_blank=True)
    producing_node = serializers.CharField(allow_blank=True)
    producing_name = serializers.CharField(allow_blank=True)


class ArtifactUseSerializer(serializers.Serializer):
    run_id = serializers.UUIDField()
    node = serializers.CharField()
    role = serializers.ChoiceField(choices=["input", "output"])
    name = serializers.CharField(help_text="the input's name, or the output's key under the node's prefix")
    artifact = ArtifactSummarySerializer()
    at = serializers.DateTimeField()


class RunLineageSerializer(serializers.Serializer):
    run_id = serializers.UUIDField()
    inputs = ArtifactUseSerializer(many=True)
    outputs = ArtifactUseSerializer(many=True)


class LineageEdgeSerializer(serializers.Serializer):
    artifact_id = serializers.IntegerField()
    step = serializers.CharField(help_text="run_id:node")
    role = serializers.ChoiceField(choices=["input", "output"])
    name = serializers.CharField()


class ArtifactLineageSerializer(serializers.Serializer):
    artifact = ArtifactSummarySerializer()
    producers = ArtifactUseSerializer(many=True)
    consumers = ArtifactUseSerializer(many=True)
    edges = LineageEdgeSerializer(many=True, help_text="every lineage row reached, upstream and downstream")
    artifacts = ArtifactSummarySerializer(many=True)
    depth = serializers.IntegerField()
    truncated = serializers.BooleanField(help_text="a depth or row bound cut the walk short")
