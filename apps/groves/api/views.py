"""Grove endpoints: the wire API (enroll, heartbeat) and the staff/CI read API. Thin: services do the work."""
from __future__ import annotations

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, status
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.api.permissions import requires
from apps.core.errors import Forbidden
from apps.groves import services
from apps.groves.api import serializers as s
from apps.groves.api.authentication import GroveCredentialAuthentication, IsOwnGrove, bearer_credential
from apps.groves.filtersets import GroveFilterSet
from apps.groves.selectors import grove_list

ERRORS = {code: OpenApiResponse(s.ErrorSerializer) for code in (400, 401, 403, 404, 410, 413)}


class GroveWireView(APIView):
    """Base for endpoints a Grove calls with its own credential."""

    authentication_classes = [GroveCredentialAuthentication]
    permission_classes = [IsOwnGrove]

    @property
    def grove(self):
        return self.request.auth.grove


class EnrollView(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(request=s.EnrollRequestSerializer, responses={201: s.EnrollResponseSerializer, **ERRORS},
                   tags=["wire"], summary="Spend a one-time enrollment token to become a Grove")
    def post(self, request):
        grove, credential = services.grove_enroll(body=request.data)
        return Response({"grove_id": str(grove.id), "credential": credential}, status=status.HTTP_201_CREATED)


class HeartbeatView(APIView):
    """Authenticates inside the view: an unchanged report is recorded by one guarded UPDATE that also
    checks the credential; everything else takes the full path with the usual auth errors."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(request=s.HeartbeatRequestSerializer, responses={200: s.HeartbeatResponseSerializer, **ERRORS},
                   tags=["wire"], summary="Report version, change kinds, capacity and log tail",
                   auth=[{"groveCredential": []}])
    def post(self, request, grove_id):
        presented = bearer_credential(request)
        if not services.grove_heartbeat_unchanged(grove_id=grove_id, presented=presented, body=request.data):
            credential = services.grove_authenticate(presented=presented)
            if str(credential.grove_id) != str(grove_id):
                raise Forbidden("grove_mismatch", "This credential belongs to another Grove.")
            services.grove_heartbeat_record(grove=credential.grove, body=request.data)
        return Response({"server_time": timezone.now(), "stale_after_s": settings.GROVE_STALE_AFTER_S})


class GroveListView(generics.ListAPIView):
    serializer_class = s.GroveSerializer
    permission_classes = [requires(GET="groves.view_grove")]
    filterset_class = GroveFilterSet

    def get_queryset(self):
        return grove_list()

    @extend_schema(tags=["groves"], summary="List Groves with their latest capacity")
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


class GroveDetailView(generics.RetrieveAPIView):
    serializer_class = s.GroveDetailSerializer
    permission_classes = [requires(GET="groves.view_grove")]
    lookup_url_kwarg = "grove_id"

    def get_queryset(self):
        return grove_list()

    @extend_schema(tags=["groves"], summary="One Grove with its latest capacity and log tail")
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)
