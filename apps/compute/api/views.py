"""Compute API (staff/CI/CLI/MCP with token auth), behind host.deploy.forest_compute_jobs. Thin."""
from __future__ import annotations

from django_filters.utils import translate_validation
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.api.permissions import requires
from apps.accounts.selectors import body_with_team, team_authorize
from apps.compute import selectors, services
from apps.compute.api import serializers as s
from apps.compute.bodies import ComputeJobRequest
from apps.compute.filtersets import ComputeJobFilterSet
from apps.core.api.serializers import ErrorSerializer
from apps.pipelines.selectors import runner_status

ERRORS = {code: OpenApiResponse(ErrorSerializer) for code in (400, 401, 403, 404, 409)}


class ComputeJobListView(APIView):
    permission_classes = [requires(GET="compute.view_computejob", POST="compute.add_computejob")]

    @extend_schema(responses={200: s.ComputeJobSerializer(many=True), **ERRORS}, tags=["compute"],
                   summary="List compute jobs (newest first, at most 100)",
                   parameters=[OpenApiParameter(name, str, required=False, description=str(f.label or name))
                               for name, f in ComputeJobFilterSet.base_filters.items()])
    def get(self, request):
        selectors.compute_enabled_or_refuse()
        found = ComputeJobFilterSet(request.query_params, queryset=selectors.compute_jobs_visible(request.user))
        if not found.is_valid():  # as DjangoFilterBackend refuses it: 400 with the filter's code and field
            raise translate_validation(found.errors)
        jobs = found.qs[:100]
        runner = runner_status()
        return Response([selectors.compute_job_view(job, runner=runner) for job in jobs])

    @extend_schema(request=ComputeJobRequest, responses={201: s.ComputeJobSerializer, **ERRORS},
                   tags=["compute"], summary="Submit a compute job: its steps run one after another")
    def post(self, request):
        job = services.compute_job_submit(body=body_with_team(request.user, request.data), created_by=request.user)
        return Response(selectors.compute_job_view(job), status=status.HTTP_201_CREATED)


class ComputeJobDetailView(APIView):
    permission_classes = [requires(GET="compute.view_computejob")]

    @extend_schema(responses={200: s.ComputeJobSerializer, **ERRORS}, tags=["compute"],
                   summary="One compute job with per-step status")
    def get(self, request, job_id):
        selectors.compute_enabled_or_refuse()
        job = selectors.compute_job_get(job_id=job_id)
        team_authorize(request.user, job.team, what="this compute job")
        return Response(selectors.compute_job_view(job))


class ComputeJobCancelView(APIView):
    permission_classes = [requires(POST="compute.change_computejob")]

    @extend_schema(request=None, responses={200: s.ComputeJobSerializer, **ERRORS}, tags=["compute"],
                   summary="Cancel a compute job: its run and its Grove jobs")
    def post(self, request, job_id):
        selectors.compute_enabled_or_refuse()
        job = services.compute_job_cancel_as(actor=request.user, job_id=job_id)
        return Response(selectors.compute_job_view(job))


class ComputeJobLogsView(APIView):
    permission_classes = [requires(GET="compute.view_computejob")]

    @extend_schema(responses={200: s.ComputeJobLogSerializer(many=True), **ERRORS}, tags=["compute"],
                   summary="The output (log tail) of every Grove job of a compute job, step by step")
    def get(self, request, job_id):
        selectors.compute_enabled_or_refuse()
        job = selectors.compute_job_get(job_id=job_id)
        team_authorize(request.user, job.team, what="this compute job")
        return Response(selectors.compute_job_logs(job))
