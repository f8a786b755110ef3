"""Shapes of the placement API (for responses and the OpenAPI schema; requests are parsed strictly by
``ExecutionRequirement.from_json``)."""
from rest_framework import serializers

from apps.placement.choices import Outcome
from apps.placement.models import ExecutionPlacement
from apps.placement.selectors import placement_decision, placement_outcome


class IncompatibilitySerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()


class CandidateSerializer(serializers.Serializer):
    grove_id = serializers.CharField()
    grove_slug = serializers.CharField()
    eligible = serializers.BooleanField()
    rank = serializers.IntegerField(allow_null=True)
    platform = serializers.CharField(allow_null=True)
    incompatibilities = IncompatibilitySerializer(many=True)
    score = serializers.JSONField(required=False, allow_null=True, help_text=(
        "every score plugin's value (0..1) and the weighted total; null when not scored (no room now, or not "
        "eligible)"))


class SelectedSerializer(serializers.Serializer):
    grove_id = serializers.CharField()
    grove_slug = serializers.CharField()
    platform = serializers.CharField()


class RefusalSerializer(serializers.Serializer):
    code = serializers.CharField()
    detail = serializers.CharField()


class PreviewResponseSerializer(serializers.Serializer):
    outcome = serializers.ChoiceField(choices=Outcome.choices, help_text="what dispatch would do now")
    waiting_for = serializers.ListField(child=serializers.CharField(),
                                        help_text="ids of the Groves it would wait for (outcome waiting)")
    selected = SelectedSerializer(allow_null=True)
    chooser = serializers.CharField()
    enforced = serializers.BooleanField()
    would_refuse = serializers.BooleanField()
    refusal = RefusalSerializer(allow_null=True)
    incompatibilities = IncompatibilitySerializer(many=True)
    candidates = CandidateSerializer(many=True)
    summary = serializers.CharField()
    scores = serializers.JSONField(allow_null=True, help_text=(
        "why here: the policy, the weights, the chosen and runner-up Groves' every plugin score and total, and "
        "a sentence"))


class ReplaceRequestSerializer(serializers.Serializer):
    reason = serializers.CharField()
    target = serializers.CharField(required=False, allow_blank=True)


class BatchItemSerializer(serializers.Serializer):
    subject_type = serializers.CharField()
    subject_id = serializers.CharField()
    requirement = serializers.JSONField()
    target = serializers.CharField(required=False)


class BatchRequestSerializer(serializers.Serializer):
    items = BatchItemSerializer(many=True)
    team = serializers.CharField(required=False)


class BatchResultSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    subject_type = serializers.CharField()
    subject_id = serializers.CharField()
    status = serializers.ChoiceField(choices=["placed", "reused", "error"])
    placement_id = serializers.IntegerField(required=False, allow_null=True)
    grove_id = serializers.CharField(required=False)
    grove_slug = serializers.CharField(required=False)
    selected_platform = serializers.CharField(required=False)
    would_refuse = serializers.BooleanField(required=False)
    error = serializers.JSONField(required=False)


class BatchResponseSerializer(serializers.Serializer):
    results = BatchResultSerializer(many=True)
    placed = serializers.IntegerField()
    reused = serializers.IntegerField()
    error = serializers.IntegerField()


class ExecutionPlacementSerializer(serializers.ModelSerializer):
    grove_id = serializers.UUIDField(allow_null=True, read_only=True)
    # A batch placement's compact decision is shown joined to its shared verdicts (explain sees them all).
    decision = serializers.SerializerMethodField()

    verdict = serializers.SerializerMethodField(
        help_text="the outcome as every surface shows it: key (placed | would_refuse | refused | waiting), label, "
                  "codes, sentence (apps/placement/outcome.py)")

    def get_decision(self, placement: ExecutionPlacement) -> dict:
        return placement_decision(placement, shared=self.context.setdefault("verdicts", {}))

    def get_verdict(self, placement: ExecutionPlacement) -> dict:
        return placement_outcome(placement).to_json()

    class Meta:
        model = ExecutionPlacement
        fields = ["id", "subject_type", "subject_id", "outcome", "code", "grove_id", "grove_slug",
                  "selected_platform", "chooser",
                  "enforced", "would_refuse", "team", "environment", "created_at", "updated_at", "requirement",
                  "decision", "history", "verdict"]
        read_only_fields = fields
