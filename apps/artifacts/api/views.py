"""Blob upload (staff/CI) and download (staff/CI and Grove credentials: agents fetch native bundles)."""
from __future__ import annotations

from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.authentication import SessionAuthentication
from rest_framework.parsers import BaseParser
from rest_framework.permissions import BasePermission
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.api.authentication import ApiTokenAuthentication
from apps.accounts.api.permissions import requires
from apps.artifacts import services
from apps.artifacts.models import Artifact
from apps.artifacts.store import check_digest
from apps.groves.api.authentication import GroveCredentialAuthentication, GrovePrincipal

CHUNK = 1 << 20


class ArtifactSerializer(serializers.ModelSerializer):
    class Meta:
        model = Artifact
        fields = ["id", "digest", "storage_kind", "reference", "media_type", "size", "platform", "signature",
                  "signing_key_id", "created_at"]


class RawStreamParser(BaseParser):
    """Leaves the body unread: the view streams it into the store."""

    media_type = "*/*"

    def parse(self, stream, media_type=None, parser_context=None):
        return stream


class BlobUploadView(APIView):
    parser_classes = [RawStreamParser]
    permission_classes = [requires(POST="artifacts.add_artifact")]

    @extend_schema(
        request={"application/octet-stream": OpenApiTypes.BINARY},
        parameters=[OpenApiParameter("digest", str, description="expected sha256:<hex>; refused on mismatch"),
                    OpenApiParameter("media_type", str), OpenApiParameter("signature", str),
                    OpenApiParameter("key_id", str)],
        responses={201: ArtifactSerializer}, tags=["artifacts"], summary="Upload a blob into the CAS",
    )
    def post(self, request):
        params = request.query_params
        digest = params.get("digest")
        if digest is not None:
            check_digest(digest)
        raw = request._request  # stream the WSGI/ASGI body; never load it whole

        def chunks():
            while True:
                chunk = raw.read(CHUNK)
                if not chunk:
                    return
                yield chunk

        artifact = services.artifact_blob_create(
            chunks=chunks(), expected_digest=digest, media_type=params.get("media_type", ""),
            signature=params.get("signature", ""), signing_key_id=params.get("key_id", ""),
        )
        return Response(ArtifactSerializer(artifact).data, status=status.HTTP_201_CREATED)


class IsGrove(BasePermission):
    """Any enrolled Grove may fetch blobs (agents download native bundles)."""

    def has_permission(self, request, view):
        return isinstance(request.user, GrovePrincipal)


class BlobDownloadView(APIView):
    authentication_classes = [GroveCredentialAuthentication, ApiTokenAuthentication, SessionAuthentication]
    permission_classes = [IsGrove | requires(GET="artifacts.view_artifact")]

    @extend_schema(responses={(200, "application/octet-stream"): OpenApiTypes.BINARY}, tags=["artifacts", "wire"],
                   summary="Download a CAS blob (Grove credential or staff token)")
    def get(self, request, digest: str):
        artifact = services.artifact_cas_get(digest=check_digest(digest))
        response = FileResponse(services.blob_store().path(digest).open("rb"),
                                content_type=artifact.media_type or "application/octet-stream")
        response["Content-Length"] = str(artifact.size)
        response["Docker-Content-Digest"] = digest
        return response
