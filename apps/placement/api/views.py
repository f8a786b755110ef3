"""Placement API for staff, CI and the CLI (DRF token or staff session; Grove credentials are refused)."""
from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics
from rest_framework.authentication import SessionAuthentication
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.api.authentication import ApiTokenAuthentication
from apps.accounts.api.permissions import requires
from apps.accounts.selectors import team_authorize, visible
from apps.core.api.serializers import ErrorSerializer
from apps.flags.selectors import is_enabled
from apps.placement import services
from apps.placement.api import serializers as s
from apps.placement.choices import COMPATIBILITY_FLAG, Outcome
from apps.placement.filtersets import ExecutionPlacementFilterSet
from apps.placement.models import ExecutionPlacement
from apps.placement.requirements import JSON_SCHEMA, ExecutionRequirement
from apps.placement.selectors import placement_list

ERRORS = {code: OpenApiResponse(ErrorSerializer) for code in (400, 401, 403, 404, 409)}
SCOPE = [OpenApiParameter("environment", str, description="Flag scope: environment id"),
         OpenApiParameter("team", str, description="Flag scope: team")]


# An authenticated *user* (API token or staff session) with the viewer's read permission; a Grove
# credential is never one.
CanView = requires(GET="placement.view_executionplacement", POST="placement.view_executionplacement")


class PlacementAPIView(APIView):
    authentication_classes = [ApiTokenAuthentication, SessionAuthentication]
    permission_classes = [CanView]


class RequirementSchemaView(PlacementAPIView):
    @extend_schema(responses={200: OpenApiTypes.OBJECT}, tags=["placements"],
                   summary="The published JSON Schema of an ExecutionRequirement")
    def get(self, request):
        return Response(JSON_SCHEMA)


class PlacementPreviewView(PlacementAPIView):
    audit_writes = False  # a POST that stores nothing
    @extend_schema(request=OpenApiTypes.OBJECT, parameters=SCOPE,
                   responses={200: s.PreviewResponseSerializer, **ERRORS}, tags=["placements"],
                   summary="Where would this requirement be placed, and why? Nothing is stored.")
    def post(self, request):
        requirement = ExecutionRequirement.from_json(request.data)
        environment = request.query_params.get("environment") or None
        team = request.query_params.get("team") or None
        enforced = is_enabled(COMPATIBILITY_FLAG, environment=environment, team=team)
        # The admission dispatch runs (compatibility, resources, accelerators after Host's claims, policy).
        decision = services.placement_preview(requirement=requirement, environment=environment, team=team)
        selected = None
        if decision.grove is not None:
            selected = {"grove_id": str(decision.grove.id), "grove_slug": decision.grove.slug,
                        "platform": decision.selected_platform}
        refusal = None
        if decision.refusal is not None:
            refusal = {"code": decision.refusal.code, "detail": decision.refusal.detail}
        return Response({
            "outcome": decision.outcome,
            "waiting_for": decision.refusal.extra["groves"] if decision.outcome == Outcome.WAITING else [],
            "selected": selected, "chooser": decision.chooser, "enforced": enforced,
            "would_refuse": decision.would_refuse, "refusal": refusal,
            "incompatibilities": [{"code": i["code"], "message": i["message"]} for i in decision.incompatibilities],
            "candidates": decision.candidates, "summary": decision.summary,
            "eligible_total": decision.eligible_total, "ineligible_total": decision.ineligible_total,
        })


class PlacementListView(generics.ListAPIView):
    authentication_classes = [ApiTokenAuthentication, SessionAuthentication]
    permission_classes = [CanView]
    serializer_class = s.ExecutionPlacementSerializer
    filterset_class = ExecutionPlacementFilterSet

    def get_queryset(self):
        return visible(placement_list(), self.request.user)

    @extend_schema(tags=["placements"], summary="Stored decisions: placed, waiting and refused (filter by "
                                                "outcome, Grove, subject, would_refuse, enforced, code)")
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


class PlacementDetailView(generics.RetrieveAPIView):
    authentication_classes = [ApiTokenAuthentication, SessionAuthentication]
    permission_classes = [CanView]
    serializer_class = s.ExecutionPlacementSerializer
    lookup_url_kwarg = "placement_id"

    def get_queryset(self):
        return placement_list()

    def get_object(self):
        placement = super().get_object()
        team_authorize(self.request.user, placement.team, what="this placement")
        return placement

    @extend_schema(tags=["placements"], summary="One stored placement with its requirement and decision")
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


class PlacementReplaceView(PlacementAPIView):
    permission_classes = [requires(POST="placement.change_executionplacement")]

    @extend_schema(request=s.ReplaceRequestSerializer, responses={200: s.ExecutionPlacementSerializer, **ERRORS},
                   tags=["placements"], summary="Staff: choose afresh for a stored placement, keeping history")
    def post(self, request, placement_id):
        body = s.ReplaceRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        placement = generics.get_object_or_404(ExecutionPlacement, pk=placement_id)
        result = services.placement_replace(placement=placement, actor=request.user,
                                            reason=body.validated_data["reason"],
                                            target=body.validated_data.get("target") or None)
        return Response(s.ExecutionPlacementSerializer(result.placement).data)

