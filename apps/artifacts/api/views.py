"""The artifacts API: list/detail, CAS upload (staff with permission) and download (staff with
permission, or a Grove whose assigned work references the blob), Grove output writes under its own
run's prefix, external image import, and GC. Every refusal is ``{"code", "detail", "field"}``."""
from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics, status
from rest_framework.authentication import SessionAuthentication
from rest_framework.parsers import BaseParser
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.api.authentication import ApiTokenAuthentication
from apps.accounts.api.permissions import Requires, requires
from apps.artifacts import rules, selectors, services
from apps.artifacts.api.serializers import (
    ArtifactDetailSerializer,
    ArtifactLineageSerializer,
    ArtifactSerializer,
    GcReportSerializer,
    GcRequestSerializer,
    ImportRequestSerializer,
    ImportResponseSerializer,
    RunLineageSerializer,
)
from apps.artifacts.digests import check_digest
from apps.artifacts.filtersets import ArtifactFilterSet
from apps.artifacts.store import CHUNK
from apps.artifacts.vocabulary import MAX_LINEAGE_DEPTH
from apps.core.api.serializers import ErrorSerializer
from apps.core.errors import Forbidden, ValidationFailed
from apps.groves.api.authentication import (
    GroveCredentialAuthentication,
    GrovePrincipal,
    IsGrove,
    JobDataPrincipal,
    JobDataTokenAuthentication,
)

ERRORS = {code: OpenApiResponse(ErrorSerializer) for code in (400, 401, 403, 404, 409, 413, 502, 503)}
ALL_AUTH = [GroveCredentialAuthentication, ApiTokenAuthentication, SessionAuthentication]
# A pod's data containers hold a job data token, never the Grove's credential: blob reads and writes only.
DATA_AUTH = [GroveCredentialAuthentication, JobDataTokenAuthentication, ApiTokenAuthentication, SessionAuthentication]


class GroveOrRequires(Requires):
    """A Grove credential (its access is scoped by the service: only what its work references), or a user
    holding the declared permission."""

    perms = {"GET": "artifacts.view_artifact"}

    def has_permission(self, request, view):
        return isinstance(request.user, GrovePrincipal) or super().has_permission(request, view)


class RawStreamParser(BaseParser):
    """Leaves the body unread: the view streams it into the store."""

    media_type = "*/*"

    def parse(self, stream, media_type=None, parser_context=None):
        return stream


def _announced_size(request) -> int | None:
    """The Content-Length the client announced (a shorter body is a truncated upload), if any."""
    try:
        length = int(request.META.get("CONTENT_LENGTH") or "")
    except ValueError:
        return None
    return length if length >= 0 else None


def _body_chunks(request):
    raw = request._request  # stream the WSGI/ASGI body; never load it whole

    def chunks():
        while chunk := raw.read(CHUNK):
            yield chunk

    return chunks()


def _stream(request, artifact, digest: str) -> StreamingHttpResponse:
    """The blob's bytes, streamed chunk by chunk from the store. Under ASGI the chunks are an async
    iterator (each read in a worker thread): Django would otherwise collect a sync iterator into one
    list before sending it — a whole blob in memory."""
    chunks = services.blob_store().open(digest)
    if isinstance(request._request, ASGIRequest):
        response = StreamingHttpResponse(_async_chunks(chunks))
    else:
        response = StreamingHttpResponse(chunks)
    for name, value in rules.download_headers(digest=digest, stored_media_type=artifact.media_type).items():
        response[name] = value
    response["Content-Length"] = str(artifact.size)
    response["Docker-Content-Digest"] = digest
    return response


async def _async_chunks(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    read = sync_to_async(next, thread_sensitive=False)
    try:
        while (chunk := await read(chunks, None)) is not None:
            yield chunk
    finally:
        await sync_to_async(getattr(chunks, "close", lambda: None), thread_sensitive=False)()


class ArtifactListView(generics.ListAPIView):
    authentication_classes = ALL_AUTH
    permission_classes = [requires(GET="artifacts.view_artifact")]
    serializer_class = ArtifactSerializer
    filterset_class = ArtifactFilterSet

    def get_queryset(self):
        return selectors.artifact_list(self.request.user)

    @extend_schema(tags=["artifacts"], summary="List artifacts of your teams (filter by kind, platform, run)")
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


class ArtifactDetailView(generics.RetrieveAPIView):
    authentication_classes = ALL_AUTH
    permission_classes = [requires(GET="artifacts.view_artifact")]
    serializer_class = ArtifactDetailSerializer

    def get_queryset(self):
        return selectors.artifact_list(self.request.user).prefetch_related("platform_checks__grove")

    @extend_schema(tags=["artifacts"], summary="One artifact with its platform checks", responses={
        200: ArtifactDetailSerializer, **ERRORS})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


class BlobUploadView(APIView):
    authentication_classes = ALL_AUTH
    permission_classes = [requires(POST="artifacts.add_artifact")]
    parser_classes = [RawStreamParser]

    @extend_schema(
        request={"application/octet-stream": OpenApiTypes.BINARY},
        parameters=[OpenApiParameter("digest", str, description="expected sha256:<hex>; refused on mismatch"),
                    OpenApiParameter("media_type", str), OpenApiParameter("signature", str),
                    OpenApiParameter("key_id", str),
                    OpenApiParameter("platform", str, description="the bundle's os/arch[/variant], if any"),
                    OpenApiParameter("team", str, description="the team that may read it (a member of one team "
                                                               "may leave it out)")],
        responses={201: ArtifactSerializer, **ERRORS}, tags=["artifacts"],
        summary="Upload a blob into the CAS (needs artifacts.add_artifact)",
    )
    def post(self, request):
        params = request.query_params
        digest = params.get("digest")
        artifact = services.artifact_blob_create(
            chunks=_body_chunks(request), expected_digest=check_digest(digest) if digest is not None else None,
            media_type=params.get("media_type", ""), signature=params.get("signature", ""),
            signing_key_id=params.get("key_id", ""), platform=params.get("platform", ""), uploaded_by=request.user,
            team=services.upload_team(request.user, params.get("team")), expected_size=_announced_size(request),
        )
        return Response(ArtifactSerializer(artifact).data, status=status.HTTP_201_CREATED)


class BlobDownloadView(APIView):
    authentication_classes = DATA_AUTH
    permission_classes = [GroveOrRequires]

    @extend_schema(responses={(200, "application/octet-stream"): OpenApiTypes.BINARY, **ERRORS},
                   tags=["artifacts", "wire"],
                   summary="Download a CAS blob (a Grove whose work references it, or artifacts.view_artifact)")
    def get(self, request, digest: str):
        check_digest(digest)
        if isinstance(request.user, JobDataPrincipal) and digest not in request.user.claims.inputs:
            raise Forbidden("blob_out_of_scope", f"Job {request.user.claims.job_id} has no input {digest}.")
        if isinstance(request.user, GrovePrincipal):
            claims = getattr(request.user, "claims", None)
            artifact = services.grove_blob_read(grove=request.user.grove, digest=digest,
                                                job_id=claims.job_id if claims is not None else None)
        else:
            artifact = services.artifact_cas_get(digest=digest, user=request.user)
        return _stream(request, artifact, digest)


class GroveBlobWriteView(APIView):
    """A Grove writes its node's outputs under ``runs/<run>/<node>/<key>`` (Grove credential only)."""

    authentication_classes = [GroveCredentialAuthentication, JobDataTokenAuthentication]
    permission_classes = [IsGrove]
    parser_classes = [RawStreamParser]

    @extend_schema(
        request={"application/octet-stream": OpenApiTypes.BINARY},
        parameters=[OpenApiParameter("digest", str, description="expected sha256:<hex>; refused on mismatch"),
                    OpenApiParameter("media_type", str)],
        responses={201: ArtifactSerializer, **ERRORS}, tags=["artifacts", "wire"],
        summary="Write an output of this Grove's live job (its own run's prefix only)",
    )
    def put(self, request, run_id: str, node: str, key: str):
        params = request.query_params
        digest = params.get("digest")
        claims = getattr(request.user, "claims", None)
        if claims is not None and (claims.run_id, claims.node) != (str(run_id), node):
            raise Forbidden("blob_write_out_of_scope", f"Job {claims.job_id} writes only under its own run's "
                            f"node ({claims.run_id}/{claims.node}).")
        artifact = services.grove_blob_write(
            grove=request.user.grove, run_id=run_id, node_id=node, key=key, chunks=_body_chunks(request),
            expected_digest=check_digest(digest) if digest is not None else None,
            media_type=params.get("media_type", ""), expected_size=_announced_size(request),
            job_id=claims.job_id if claims is not None else None)
        return Response(ArtifactSerializer(artifact).data, status=status.HTTP_201_CREATED)


class ImageImportView(APIView):
    authentication_classes = ALL_AUTH
    permission_classes = [requires(POST="artifacts.add_artifact")]

    @extend_schema(request=ImportRequestSerializer, responses={201: ImportResponseSerializer, **ERRORS},
                   tags=["artifacts"], summary="Import an external image for a Grove (resolves an OCI index)")
    def post(self, request):
        body = ImportRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        grove = selectors.grove_by_id_or_slug(body.validated_data["grove"])
        artifact, facts, check = services.oci_image_import(reference=body.validated_data["reference"], grove=grove)
        data = {"artifact": artifact, "index_digest": facts.index_digest, "matched": facts.matched,
                "offered": facts.offered, "check": check}
        return Response(ImportResponseSerializer(data).data, status=status.HTTP_201_CREATED)


class GcView(APIView):
    authentication_classes = ALL_AUTH
    permission_classes = [requires(POST="artifacts.delete_artifact")]

    @extend_schema(request=GcRequestSerializer, responses={200: GcReportSerializer, **ERRORS}, tags=["artifacts"],
                   summary="Garbage-collect unreferenced CAS blobs past the grace period")
    def post(self, request):
        body = GcRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return Response(GcReportSerializer(services.artifact_gc(dry_run=body.validated_data["dry_run"])).data)


class ArtifactLineageView(APIView):
    authentication_classes = ALL_AUTH
    permission_classes = [requires(GET="artifacts.view_artifact")]

    @extend_schema(parameters=[OpenApiParameter("depth", int, description="hops each way (1 to 5, default 5)")],
                   responses={200: ArtifactLineageSerializer, **ERRORS}, tags=["artifacts"],
                   summary="An artifact's producer and consumers, followed upstream and downstream (bounded)")
    def get(self, request, pk: int):
        artifact = selectors.artifact_get(artifact_id=pk, user=request.user)
        try:
            depth = int(request.query_params.get("depth", MAX_LINEAGE_DEPTH))
        except ValueError:
            raise ValidationFailed("invalid_type", "depth must be an integer.", field="depth") from None
        return Response(selectors.artifact_lineage(artifact=artifact, user=request.user, depth=depth))


class RunLineageView(APIView):
    authentication_classes = ALL_AUTH
    permission_classes = [requires(GET="artifacts.view_artifact")]

    @extend_schema(responses={200: RunLineageSerializer, **ERRORS}, tags=["artifacts"],
                   summary="What each node of a pipeline run consumed and produced")
    def get(self, request, run_id):
        return Response(selectors.run_lineage(run_id=run_id, user=request.user))
