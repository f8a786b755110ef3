"""Pipelines API (staff/CI: token auth) and the job half of the Grove wire API. Thin: services do the work."""
from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics, status
from rest_framework.exceptions import MethodNotAllowed
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.api.permissions import requires
from apps.accounts.selectors import body_with_team, team_authorize, visible
from apps.groves.api.serializers import ErrorSerializer
from apps.groves.api.views import GroveWireView
from apps.pipelines import rules, selectors, services
from apps.pipelines.api import serializers as s
from apps.pipelines.filtersets import RunFilterSet

ERRORS = {code: OpenApiResponse(ErrorSerializer) for code in (400, 401, 403, 404, 409)}


class JobClaimView(GroveWireView):
    @extend_schema(request=None, responses={200: s.ClaimResponseSerializer, **ERRORS}, tags=["wire"],
                   summary="Claim an assigned job: exactly one claimer wins, the rest get 409 already_claimed")
    def post(self, request, grove_id, job_id):
        job = services.grove_job_claim(grove=self.grove, job_id=job_id)
        return Response({"job": selectors.job_wire(job)})


class JobReportView(GroveWireView):
    @extend_schema(request=s.ReportRequestSerializer, responses={200: s.ReportResponseSerializer, **ERRORS},
                   tags=["wire"], summary="Report progress or a terminal state (idempotent)")
    def post(self, request, grove_id, job_id):
        return Response(services.grove_job_report(grove=self.grove, job_id=job_id, body=request.data))


class ChangesSchemaView(GroveWireView):
    """Describes ``GET groves/{id}/changes`` in the OpenAPI schema. Requests are served by the async
    ``apps.pipelines.api.wire.changes_view``; this class is only its documentation stand-in."""

    @extend_schema(
        parameters=[OpenApiParameter("wait", int, description="seconds to wait for work, 0..30 (default 20)")],
        responses={200: s.ChangesSerializer, **ERRORS}, tags=["wire-long-poll"],
        summary="Long-poll for this Grove's assigned jobs, workload generations and cancellations",
        description="Returns at once when the Grove has unclaimed jobs, unacknowledged cancellations or a "
                    "workload generation it has not reported on; otherwise waits up to `wait` seconds, woken "
                    "when work is assigned. `workloads` always carries the whole desired workload state.",
    )
    def get(self, request, grove_id):  # pragma: no cover - never routed; see the docstring
        raise MethodNotAllowed("GET", detail="Served by the async changes view, not this schema stand-in.")


class RunListCreateView(generics.ListAPIView):
    permission_classes = [requires(GET="pipelines.view_pipelinerun", POST="pipelines.add_pipelinerun")]
    serializer_class = s.RunSerializer
    filterset_class = RunFilterSet

    def get_queryset(self):
        return visible(selectors.run_list(), self.request.user)

    @extend_schema(tags=["pipelines"], summary="List pipeline runs")
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(request=s.RunCreateSerializer, responses={201: s.RunDetailSerializer, **ERRORS},
                   tags=["pipelines"], summary="Create a run from a Canopy Pipeline Graph")
    def post(self, request):
        data = rules.run_request(body_with_team(request.user, request.data))
        run = services.pipeline_run_create(graph=data["graph"], kind=data["kind"],
                                           environment=data.get("environment", ""), team=data.get("team", ""),
                                           build_id=data.get("build_id"), created_by=request.user)
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
        team_authorize(request.user, selectors.run_get(run_id=run_id).team, what="this run")
        run = services.pipeline_run_cancel(run_id=run_id, reason="cancelled")
        return Response(s.RunDetailSerializer(run).data)
