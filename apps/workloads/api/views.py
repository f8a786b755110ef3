"""Native workload API: staff/CI write desired state; agents report observed state per generation."""
from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import generics, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.api.permissions import requires
from apps.accounts.selectors import body_with_team, team_authorize, team_for_write, visible
from apps.core.api.serializers import ErrorSerializer
from apps.dispatch.api.views import GroveWireView
from apps.workloads import services
from apps.workloads.api import serializers as s
from apps.workloads.bodies import WorkloadStatus
from apps.workloads.models import NativeWorkload

ERRORS = {code: OpenApiResponse(ErrorSerializer) for code in (400, 401, 403, 404, 409)}


class NativeWorkloadListView(generics.ListAPIView):
    serializer_class = s.NativeWorkloadSerializer
    permission_classes = [requires(GET="workloads.view_nativeworkload", POST="workloads.add_nativeworkload")]

    def get_queryset(self):
        return visible(NativeWorkload.objects.select_related("bundle", "grove").prefetch_related(
            "generations__grove"), self.request.user)

    @extend_schema(tags=["workloads"], summary="List desired native workloads with recent generations")
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(request=s.NativeWorkloadRequestSerializer, responses={200: s.NativeWorkloadSerializer, **ERRORS},
                   tags=["workloads"], summary="Create or update a native workload (writes a generation on change)")
    def post(self, request):
        existing = _existing(request.data)
        if existing is not None:
            team_authorize(request.user, existing.team, what=f"workload '{existing.slug}'")
        workload, _ = services.native_workload_apply(body=body_with_team(request.user, request.data))
        return Response(s.NativeWorkloadSerializer(workload).data)


def _existing(body) -> NativeWorkload | None:
    """The workload an apply would update (its team must be the caller's too), if any."""
    slug = body.get("slug") if isinstance(body, dict) else None
    return NativeWorkload.objects.filter(slug=slug).first() if isinstance(slug, str) and slug else None


class NativeWorkloadDetailView(generics.RetrieveAPIView):
    serializer_class = s.NativeWorkloadSerializer
    queryset = NativeWorkload.objects.select_related("bundle", "grove")
    lookup_field = "slug"
    permission_classes = [requires(GET="workloads.view_nativeworkload", DELETE="workloads.delete_nativeworkload")]

    def get_object(self):
        workload = super().get_object()
        team_authorize(self.request.user, workload.team, what=f"workload '{workload.slug}'")
        return workload

    @extend_schema(tags=["workloads"], summary="One native workload with its recent generations")
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(responses={204: None, **ERRORS}, tags=["workloads"],
                   summary="Remove a native workload (its host names are freed; its route goes at the next render)")
    def delete(self, request, *args, **kwargs):
        services.native_workload_delete(workload=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


class WorkloadSecretView(APIView):
    permission_classes = [requires(POST="workloads.add_workloadsecret")]

    @extend_schema(request=s.SecretRequestSerializer,
                   responses={201: inline_serializer("SecretSet", {"team": serializers.CharField(),
                                                                   "environment": serializers.CharField(),
                                                                   "name": serializers.CharField()}), **ERRORS},
                   tags=["workloads"], summary="Set one of your team's workload secrets (stored encrypted; never "
                                               "returned)")
    def post(self, request):
        body = s.SecretRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        # The caller's own team, by the rule every write follows: naming another team is 403 team_forbidden.
        team = team_for_write(request.user, body.validated_data.get("team"))
        secret = services.workload_secret_set(team=team, environment=body.validated_data.get("environment", "default"),
                                              name=body.validated_data["name"], value=body.validated_data["value"])
        return Response({"team": secret.team, "environment": secret.environment, "name": secret.name},
                        status=status.HTTP_201_CREATED)


class GenerationStatusView(GroveWireView):
    @extend_schema(request=WorkloadStatus,
                   responses={200: inline_serializer("GenerationStatus", {"generation_id": serializers.UUIDField(),
                                                                          "state": serializers.CharField()}),
                              **ERRORS},
                   tags=["wire"], summary="Report the observed state of a workload generation")
    def post(self, request, grove_id, generation_id):
        generation = services.workload_status_record(grove=self.grove, generation_id=generation_id,
                                                     body=request.data)
        return Response({"generation_id": str(generation.id), "state": generation.state})
