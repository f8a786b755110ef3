"""Placement API for staff, CI and the CLI (DRF token or staff session; Grove credentials are refused)."""
from __future__ import annotations

import orjson
from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics
from rest_framework.authentication import SessionAuthentication
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.api.authentication import ApiTokenAuthentication
from apps.accounts.api.permissions import requires
from apps.accounts.selectors import authorize, team_authorize, team_for_write, visible
from apps.core.api.parsers import LargeBodyJSONParser
from apps.core.api.serializers import ErrorSerializer
from apps.core.errors import ForestError, ValidationFailed
from apps.core.gcpause import collection_paused
from apps.flags.selectors import is_enabled
from apps.placement import batch, services
from apps.placement.api import serializers as s
from apps.placement.choices import COMPATIBILITY_FLAG, Outcome
from apps.placement.filtersets import ExecutionPlacementFilterSet
from apps.placement.models import ExecutionPlacement
from apps.placement.requirements import JSON_SCHEMA, ExecutionRequirement
from apps.placement.selectors import placement_list
from apps.placement.vocabulary import MAX_BATCH_SIZE

ERRORS = {code: OpenApiResponse(ErrorSerializer) for code in (400, 401, 403, 404, 409)}
SCOPE = [OpenApiParameter("environment", str, description="Flag scope: environment id"),
         OpenApiParameter("team", str, description="Flag scope: team")]
SUBJECT = [OpenApiParameter("subject_type", str, description="Preview for this subject (with subject_id): the "
                            "sampling and the tie-break its dispatch will use"),
           OpenApiParameter("subject_id", str, description="The subject's id"),
           OpenApiParameter("group", str, description="The subject's spread group (e.g. run:ID), for run spread")]


def _preview_subject(params) -> str:
    """``type:id`` of the subject a preview is for (validated), or "" for none."""
    subject_type, subject_id = params.get("subject_type") or "", params.get("subject_id") or ""
    if not subject_type and not subject_id:
        return ""
    return services.subject_label(*services.subject_key(subject_type, subject_id))


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
    @extend_schema(request=OpenApiTypes.OBJECT, parameters=SCOPE + SUBJECT,
                   responses={200: s.PreviewResponseSerializer, **ERRORS}, tags=["placements"],
                   summary="Where would this requirement be placed, and why? Nothing is stored.")
    def post(self, request):
        requirement = ExecutionRequirement.from_json(request.data)
        environment = request.query_params.get("environment") or None
        team = request.query_params.get("team") or None
        if team is not None:  # a preview for a team reads its flags and accelerator budget: members only
            team_authorize(request.user, team, what="a preview for this team")
        subject = _preview_subject(request.query_params)
        group = request.query_params.get("group") or None
        enforced = is_enabled(COMPATIBILITY_FLAG, environment=environment, team=team)
        # The admission dispatch runs (compatibility, resources, accelerators after Host's claims, policy), and
        # for a named subject and spread group the very ranking its dispatch makes.
        decision = services.placement_preview(requirement=requirement, environment=environment, team=team,
                                              subject=subject, group=group)
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
            "scores": decision.scores,
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
        authorize(request.user, "placement.change_executionplacement", team=placement.team, what="this placement")
        result = services.placement_replace(placement=placement, actor=request.user,
                                            reason=body.validated_data["reason"],
                                            target=body.validated_data.get("target") or None)
        return Response(s.ExecutionPlacementSerializer(result.placement).data)



class BatchJSONParser(LargeBodyJSONParser):
    """The batch endpoint's own body limit (``PLACEMENT_BATCH_MAX_BODY_BYTES``): a full batch is ~1.7 MB."""

    def limit(self) -> int:
        return settings.PLACEMENT_BATCH_MAX_BODY_BYTES


class PlacementBatchView(PlacementAPIView):
    """CI: place many subjects in one transaction (``apps.placement.batch``); one result per item, in order."""

    permission_classes = [requires(POST="placement.add_executionplacement")]
    parser_classes = [BatchJSONParser]

    @extend_schema(request=s.BatchRequestSerializer, parameters=SCOPE,
                   responses={200: s.BatchResponseSerializer, **ERRORS}, tags=["placements"],
                   summary=f"Place up to {MAX_BATCH_SIZE} subjects at once; each item placed, reused or refused "
                           "with its own code")
    def post(self, request):
        # Thousands of items, decisions and results (apps.core.gcpause). The body is parsed inside the same
        # block: the parser's own pause ending first turned the collector back on over the freshly parsed
        # items, and its next allocation paid for a collection (~4% of the endpoint's CPU).
        with collection_paused():
            return self._place(request, request.data)

    def _place(self, request, body):
        raw = body.get("items") if isinstance(body, dict) else None
        if not isinstance(raw, list) or not raw:
            raise ValidationFailed("items_required", "Send {\"items\": [{\"subject_type\", \"subject_id\", "
                                   "\"requirement\"}, ...]}.", field="items")
        if len(raw) > MAX_BATCH_SIZE:
            raise ValidationFailed("batch_too_large", f"A batch places at most {MAX_BATCH_SIZE} subjects; this "
                                   f"one has {len(raw)}.", field="items")
        team = team_for_write(request.user, body.get("team"))
        environment = request.query_params.get("environment") or None
        items, errors = [], {}
        for index, entry in enumerate(raw):
            try:
                items.append(_batch_item(entry, index, team=team or None, environment=environment))
            except ForestError as error:
                errors[index] = error
        outcomes = iter(batch.place_batch(items))
        results = []
        for index, entry in enumerate(raw):
            if index in errors:
                subject = entry if isinstance(entry, dict) else {}
                results.append({"index": index, "subject_type": str(subject.get("subject_type", "")),
                                "subject_id": str(subject.get("subject_id", "")), "status": "error",
                                "error": errors[index].as_dict()})
                continue
            outcome = next(outcomes)
            result = {"index": index, "subject_type": outcome.subject_type, "subject_id": outcome.subject_id,
                      "status": outcome.status}
            if outcome.error is not None:
                result["error"] = outcome.error.as_dict()
            else:
                result.update(placement_id=outcome.placement_id, grove_id=outcome.grove_id,
                              grove_slug=outcome.grove_slug, selected_platform=outcome.selected_platform,
                              would_refuse=outcome.would_refuse)
            results.append(result)
        counts = {status: sum(1 for r in results if r["status"] == status) for status in ("placed", "reused", "error")}
        return Response({"results": results, **counts})


def _batch_item(entry, index: int, *, team: str | None, environment: str | None) -> batch.BatchItem:
    if not isinstance(entry, dict):
        raise ValidationFailed("invalid_type", "Each item is an object.", field=f"items[{index}]")
    unknown = set(entry) - {"subject_type", "subject_id", "requirement", "target", "group"}
    if unknown:
        raise ValidationFailed("unknown_field", f"Unknown item field(s): {', '.join(sorted(unknown))}.",
                               field=f"items[{index}]")
    target = entry.get("target")
    if target is not None and not isinstance(target, str):
        raise ValidationFailed("invalid_type", "target is a Grove id or slug.", field=f"items[{index}].target")
    subject_type, subject_id = entry.get("subject_type", ""), entry.get("subject_id", "")
    if not isinstance(subject_type, str):
        raise ValidationFailed("invalid_type", "subject_type is a string.", field=f"items[{index}].subject_type")
    if not isinstance(subject_id, str | int) or isinstance(subject_id, bool):
        raise ValidationFailed("invalid_type", "subject_id is a string.", field=f"items[{index}].subject_id")
    group = entry.get("group")
    if group is not None and (not isinstance(group, str) or len(group) > 100):
        raise ValidationFailed("invalid_type", "group is a string of at most 100 characters (the spread group).",
                               field=f"items[{index}].group")
    subject_type, subject_id = services.subject_key(subject_type, subject_id)
    return batch.BatchItem(subject_type=subject_type, subject_id=subject_id,
                           requirement=parsed(entry.get("requirement")), target=target or None, team=team,
                           environment=environment, group=group or None)


def parsed(body) -> ExecutionRequirement:
    """``ExecutionRequirement.from_json``, kept per body (an immutable result, a bounded cache): a batch's
    items mostly repeat a few requirements, and parsing each of 5,000 bodies cost more than deciding it.
    The key is the parsed JSON encoded again by orjson (unambiguous for JSON values, an eighth of ``repr``'s
    time; a reordered body is only a miss: the body reader has refused any integer beyond 64 bits, which orjson
    would not encode). A body that does not parse is never kept; its error is raised each time."""
    key = orjson.dumps(body)
    found = _PARSED.get(key)
    if found is None:
        found = ExecutionRequirement.from_json(body)
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[key] = found
    return found


_PARSED: dict[bytes, ExecutionRequirement] = {}
_PARSED_MAX = 1024
