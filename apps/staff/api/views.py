"""The staff read API: what the staff pages show, as JSON for the CLI, MCP and scripts.

Behind the same two gates as the pages: a staff user (``apps.core.permissions.IsStaff``; a DRF token or
a staff session) and ``host.staff.execution_observability`` (off → 404 ``feature_disabled``). Lists use
the pages' filtersets, so a filter means the same thing on every surface, and the pages' actor-scoped
selectors, so a reader sees here exactly what the pages show them (their teams' work; counts only of
other teams').
"""
from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics, serializers
from rest_framework.authentication import SessionAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.api.authentication import ApiTokenAuthentication
from apps.accounts.api.permissions import requires
from apps.core.api.serializers import ErrorSerializer
from apps.core.errors import NotFound, ValidationFailed
from apps.core.permissions import STAFF_PERMISSION, IsStaff
from apps.flags.registry import FLAGS
from apps.flags.selectors import is_enabled
from apps.groves.api.serializers import GroveSerializer
from apps.groves.filtersets import GroveFilterSet
from apps.placement.api.serializers import ExecutionPlacementSerializer
from apps.placement.filtersets import ExecutionPlacementFilterSet
from apps.placement.selectors import shared_verdicts
from apps.staff import capabilities, selectors
from apps.staff.views import FLAG, REPORT_MAX_DAYS

ERRORS = {code: OpenApiResponse(ErrorSerializer) for code in (400, 401, 403, 404)}


class ObservabilityEnabled(BasePermission):
    def has_permission(self, request, view) -> bool:
        if not is_enabled(FLAG):
            raise NotFound("feature_disabled", f"The staff observability API is off; an operator can turn on {FLAG}.")
        return True


class StaffAPIView(APIView):
    authentication_classes = [ApiTokenAuthentication, SessionAuthentication]
    # IsStaff first: a non-staff caller hears "staff_only"; the declared permission is the role check.
    permission_classes = [IsStaff, requires(GET=STAFF_PERMISSION), ObservabilityEnabled]


class StaffGroveListView(generics.ListAPIView):
    authentication_classes = StaffAPIView.authentication_classes
    permission_classes = StaffAPIView.permission_classes
    serializer_class = GroveSerializer
    filterset_class = GroveFilterSet

    def get_queryset(self):
        return selectors.grove_table_rows().order_by("slug")

    @extend_schema(tags=["staff"], summary="Groves with their latest capacity (staff)",
                   responses={200: GroveSerializer(many=True), **ERRORS})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


class StaffPlacementSerializer(ExecutionPlacementSerializer):
    subject = serializers.SerializerMethodField(help_text="what the subject is: label, status, run and node")

    class Meta(ExecutionPlacementSerializer.Meta):
        fields = [*ExecutionPlacementSerializer.Meta.fields, "subject"]

    def get_subject(self, obj) -> dict:
        described = self.context.get("subjects", {}).get(obj.pk, {})
        return {**described, "run_id": str(described["run_id"]) if described.get("run_id") else None,
                "compute_job_id": str(described["compute_job_id"]) if described.get("compute_job_id") else None}


class StaffPlacementListView(generics.ListAPIView):
    authentication_classes = StaffAPIView.authentication_classes
    permission_classes = StaffAPIView.permission_classes
    serializer_class = StaffPlacementSerializer
    filterset_class = ExecutionPlacementFilterSet

    def get_queryset(self):
        refused = self.request.query_params.get("refused", "").lower() in {"true", "1", "yes"}
        user = self.request.user
        return (selectors.refused_placements(user, whole=True) if refused
                else selectors.placement_rows(user, whole=True))

    def get_serializer(self, *args, **kwargs):
        if args:
            kwargs.setdefault("context", self.get_serializer_context())
            page = list(args[0])
            kwargs["context"]["subjects"] = selectors.subjects_describe(page)
            kwargs["context"]["verdicts"] = shared_verdicts(page)
        return super().get_serializer(*args, **kwargs)

    @extend_schema(tags=["staff"], summary="Placements with their subjects (staff); refused=true: only refusals",
                   parameters=[OpenApiParameter("refused", bool, description="Only would-refuse / refused")],
                   responses={200: StaffPlacementSerializer(many=True), **ERRORS})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


class StaffInventoryView(StaffAPIView):
    @extend_schema(tags=["staff"], summary="Accelerators by api/vendor/model, and per-team use",
                   responses={200: OpenApiTypes.OBJECT, **ERRORS})
    def get(self, request):
        groups = [{"api": g.api, "vendor": g.vendor, "model": g.model, "memory_bytes": g.memory_bytes,
                   "memory_kind": g.memory_kind, "share_mode": g.share_mode, "groves": g.groves,
                   "groves_not_ready": g.groves_not_ready, "items": g.items, "allocatable": g.allocatable,
                   "free": g.free, "simulated": g.simulated}
                  for g in selectors.inventory_groups()]
        teams = [{"team": u.entitlement.team, "api": u.entitlement.api, "vendor": u.entitlement.vendor,
                  "max_concurrent": u.entitlement.max_concurrent, "concurrent": u.concurrent,
                  "budget_accelerator_seconds": u.entitlement.budget_accelerator_seconds,
                  "used_accelerator_seconds": round(u.used_s, 3), "period": u.entitlement.period,
                  "refusals": u.refusals} for u in selectors.team_usage(request.user)]
        # ``accelerators`` is the inventory; what only the demo's simulated Groves report is listed apart.
        return Response({"accelerators": [g for g in groups if not g["simulated"]],
                         "simulated": [g for g in groups if g["simulated"]], "teams": teams})


def parse_since(value: str | None, *, field: str, default: datetime) -> datetime:
    """A moment (in UTC) from ``2026-01-31``, an ISO timestamp, or a relative ``7d`` / ``12h`` / ``30m``."""
    if not value:
        return default
    text = value.strip()
    units = {"d": "days", "h": "hours", "m": "minutes"}
    invalid = ValidationFailed("invalid_value", f"'{value}' is not a date, a timestamp or a duration like 7d.",
                               field=field)
    try:
        if text[:-1].isdigit() and text[-1:] in units:
            return timezone.now() - timedelta(**{units[text[-1]]: int(text[:-1])})
        moment = parse_datetime(text)
        if moment is None and (day := parse_date(text)) is not None:
            moment = datetime.combine(day, time.min)
        if moment is None:
            raise invalid
        # PostgreSQL refuses offsets beyond ±15:59, which Python accepts: compare in UTC.
        return (timezone.make_aware(moment, UTC) if timezone.is_naive(moment) else moment).astimezone(UTC)
    except (ValueError, OverflowError):
        raise invalid from None


class StaffRefusalReportView(StaffAPIView):
    @extend_schema(tags=["staff"], summary="The 'would have refused' report over a window",
                   parameters=[OpenApiParameter("since", str, description="YYYY-MM-DD, ISO timestamp or 7d"),
                               OpenApiParameter("until", str, description="YYYY-MM-DD or ISO timestamp")],
                   responses={200: OpenApiTypes.OBJECT, **ERRORS})
    def get(self, request):
        until = parse_since(request.query_params.get("until"), field="until", default=timezone.now())
        since = parse_since(request.query_params.get("since"), field="since", default=until - timedelta(days=14))
        if since >= until:
            raise ValidationFailed("invalid_window", "since must be before until.", field="since")
        if until - since > timedelta(days=REPORT_MAX_DAYS):
            raise ValidationFailed("invalid_window", f"The window is at most {REPORT_MAX_DAYS} days.", field="since")
        report = selectors.refusal_report(request.user, since=since, until=until)
        return Response({
            "since": since, "until": until, "total": report.total,
            "refused": report.refused, "would_refuse": report.would_refuse,
            "groves": report.groves, "no_grove": report.no_grove,
            "by_code": [{"code": c, "count": n} for c, n in report.by_code],
            "by_grove": [{"grove": g, "count": n} for g, n in report.by_grove],
            "by_team": [{"team": t, "count": n} for t, n in report.by_team],
            "trend": [{"day": d.isoformat(), "count": n} for d, n in report.trend],
            "node_refusals": [{"reason": r, "count": n} for r, n in report.node_refusals],
        })


class StaffCapabilitySerializer(serializers.Serializer):
    """One entry of the capability registry (doc only: the view answers a list of these)."""

    name = serializers.CharField()
    state = serializers.CharField()
    status = serializers.CharField()
    flag = serializers.CharField(allow_null=True)
    flag_enabled = serializers.BooleanField(allow_null=True)
    setting = serializers.CharField(allow_null=True)
    evidence = serializers.CharField()


class StaffCapabilityView(StaffAPIView):
    @extend_schema(tags=["staff"], summary="What is proven here: the capability status registry",
                   responses={200: StaffCapabilitySerializer(many=True), **ERRORS})
    def get(self, request):
        defaults = {name: flag.default for name, flag in FLAGS.items()}
        return Response([{"name": c.name, "state": c.state, "status": capabilities.state_label(c, defaults),
                          "flag": c.flag or None, "flag_enabled": is_enabled(c.flag) if c.flag else None,
                          "setting": c.setting or None, "evidence": c.evidence}
                         for c in capabilities.CAPABILITIES])
