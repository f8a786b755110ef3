"""Pipelines API (staff/CI: token auth). Thin: services do the work."""
from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, status
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.api.permissions import requires
from apps.accounts.selectors import body_with_team, team_authorize, visible
from apps.core.api.serializers import ErrorSerializer
from apps.pipelines import bodies, selectors, services
from apps.pipelines.api import serializers as s
from apps.pipelines.bodies import RunRequest
from apps.pipelines.filtersets import RunFilterSet

ERRORS = {code: OpenApiResponse(ErrorSerializer) for code in (400, 401, 403, 404, 409)}


class RunListCreateView(generics.ListAPIView):
    permission_classes = [requires(GET="pipelines.view_pipelinerun", POST="pipelines.add_pipelinerun")]
    serializer_class = s.RunSerializer
    filterset_class = RunFilterSet

    def get_queryset(self):
        return visible(selectors.run_list(), self.request.user)

    @extend_schema(tags=["pipelines"], summary="List pipeline runs")
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(request=RunRequest, responses={201: s.RunDetailSerializer, **ERRORS},
                   tags=["pipelines"], summary="Create a run from a Canopy Pipeline Graph")
    def post(self, request):
        data = bodies.run_request(body_with_team(request.user, request.data))
        run = services.pipeline_run_create(canonical=data["canonical"], kind=data["kind"],
                                           environment=data["environment"], team=data["team"],
                                           build_id=data["build_id"], created_by=request.user)
        return Response(s.RunDetailSerializer(run).data, status=status.HTTP_201_CREATED)


class RunDetailView(APIView):
    permission_classes = [requires(GET="pipelines.view_pipelinerun")]

    @extend_schema(responses={200: s.RunDetailSerializer, **ERRORS}, tags=["pipelines"],
                   summary="One run with its nodes")
    def get(self, request, run_id):
        run = selectors.run_get(run_id=run_id)
        team_authorize(request.user, run.team, what="this run")
        return Response(s.RunDetailSerializer(run).data)


class RunCancelView(APIView):
    permission_classes = [requires(POST="pipelines.change_pipelinerun")]

    @extend_schema(request=None, responses={200: s.RunDetailSerializer, **ERRORS}, tags=["pipelines"],
                   summary="Cancel a run and its own Grove jobs")
    def post(self, request, run_id):
        run = services.pipeline_run_cancel_as(actor=request.user, run_id=run_id, reason="cancelled")
        return Response(s.RunDetailSerializer(run).data)
