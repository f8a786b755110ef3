"""The Grove wire API (``/api/forest/v1/groves/...``): enroll, heartbeat, claim, report, and the schema
stand-in of the async ``changes`` long-poll (``wire.py``). Thin: services do the work."""
from __future__ import annotations

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import MethodNotAllowed
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.api.serializers import ErrorSerializer
from apps.dispatch import selectors, services
from apps.dispatch.api import serializers as s
from apps.dispatch.bodies import JobReport
from apps.groves import services as grove_services
from apps.groves.api.authentication import (
    GroveCredentialAuthentication,
    IsGrove,
    bearer_credential,
    grove_for_request,
)
from apps.groves.bodies import EnrollRequest, HeartbeatRequest

ERRORS = {code: OpenApiResponse(ErrorSerializer) for code in (400, 401, 403, 404, 409, 410, 413)}


class GroveWireView(APIView):
    """Base for endpoints a Grove calls with its own credential, for the Grove named in the URL."""

    authentication_classes = [GroveCredentialAuthentication]
    permission_classes = [IsGrove]

    @property
    def grove(self):
        return self.request.auth


class EnrollView(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(request=EnrollRequest, responses={201: s.EnrollResponseSerializer, **ERRORS},
                   tags=["wire"], summary="Spend a one-time enrollment token to become a Grove")
    def post(self, request):
        grove, credential = grove_services.grove_enroll(body=request.data)
        return Response({"grove_id": str(grove.id), "credential": credential}, status=status.HTTP_201_CREATED)


class HeartbeatView(APIView):
    """Authenticates inside the view: an unchanged report is recorded by one guarded UPDATE that also
    checks the credential; everything else takes the full path with the usual auth errors."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(request=HeartbeatRequest, responses={200: s.HeartbeatResponseSerializer, **ERRORS},
                   tags=["wire"], summary="Report version, change kinds, capacity and log tail",
                   auth=[{"groveCredential": []}])
    def post(self, request, grove_id):
        if not grove_services.grove_heartbeat_unchanged(grove_id=grove_id, presented=bearer_credential(request),
                                                        body=request.data):
            grove_services.grove_heartbeat_record(grove=grove_for_request(request, grove_id), body=request.data)
        return Response({"server_time": timezone.now(), "stale_after_s": settings.GROVE_STALE_AFTER_S})


class JobClaimView(GroveWireView):
    @extend_schema(request=None, responses={200: s.ClaimResponseSerializer, **ERRORS}, tags=["wire"],
                   summary="Claim an assigned job: exactly one claimer wins, the rest get 409 already_claimed")
    def post(self, request, grove_id, job_id):
        job = services.grove_job_claim(grove=self.grove, job_id=job_id)
        return Response({"job": selectors.job_wire(job)})


class JobDataTokenView(GroveWireView):
    @extend_schema(request=None, responses={200: s.DataTokenSerializer, **ERRORS}, tags=["wire"],
                   summary="A short-lived token for a claimed job's step data (its inputs, its outputs)")
    def post(self, request, grove_id, job_id):
        return Response(services.grove_job_data_token(grove=self.grove, job_id=job_id))


class JobReportView(GroveWireView):
    @extend_schema(request=JobReport, responses={200: s.ReportResponseSerializer, **ERRORS},
                   tags=["wire"], summary="Report progress or a terminal state (idempotent)")
    def post(self, request, grove_id, job_id):
        return Response(services.grove_job_report(grove=self.grove, job_id=job_id, body=request.data))


class ChangesSchemaView(GroveWireView):
    """Describes ``GET groves/{id}/changes`` in the OpenAPI schema. Requests are served by the async
    ``apps.dispatch.api.wire.changes_view``; this class is only its documentation stand-in."""

    @extend_schema(
        parameters=[OpenApiParameter("wait", int, description="seconds to wait for work, 0..30 (default 20)")],
        responses={200: s.ChangesSerializer, **ERRORS}, tags=["wire-long-poll"],
        summary="Long-poll for this Grove's assigned jobs, workload generations and cancellations",
        description="Returns at once when the Grove has unclaimed jobs, unacknowledged cancellations or a "
                    "workload generation it has not reported on; otherwise waits up to `wait` seconds, woken "
                    "when work is assigned. `workloads` always carries the whole desired workload state.",
    )
    def get(self, request, grove_id):
        raise MethodNotAllowed("GET", detail="Served by the async changes view, not this schema stand-in.")
