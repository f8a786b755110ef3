"""One placement filterset for the API list and the staff pages (each filter has an index)."""
import django_filters
from django.db import connection
from django.db.models import Q

from apps.core.filters import UtcIsoDateTimeFilter, YesNoFilter
from apps.placement.choices import Chooser, Outcome, SubjectType
from apps.placement.models import ExecutionPlacement


class ExecutionPlacementFilterSet(django_filters.FilterSet):
    grove = django_filters.UUIDFilter(field_name="grove_id", label="Grove id")
    grove_slug = django_filters.CharFilter(label="Grove")
    subject_type = django_filters.ChoiceFilter(choices=SubjectType.choices, empty_label="any")
    subject_id = django_filters.CharFilter()
    outcome = django_filters.ChoiceFilter(choices=Outcome.choices, empty_label="any",
                                          help_text="placed, waiting (for capacity) or refused")
    platform = django_filters.CharFilter(field_name="selected_platform", label="Platform")
    would_refuse = YesNoFilter(label="Would refuse")
    enforced = YesNoFilter()
    chooser = django_filters.ChoiceFilter(choices=Chooser.choices, empty_label="any")
    code = django_filters.CharFilter(method="filter_code", label="Code")
    team = django_filters.CharFilter()
    created_after = UtcIsoDateTimeFilter(field_name="created_at", lookup_expr="gte", label="Since")
    created_before = UtcIsoDateTimeFilter(field_name="created_at", lookup_expr="lt", label="Before")

    class Meta:
        model = ExecutionPlacement
        fields = ["grove", "grove_slug", "subject_type", "subject_id", "outcome", "platform", "would_refuse",
                  "enforced", "chooser", "code", "team", "created_after", "created_before"]

    def filter_code(self, queryset, name, value):
        code = value.strip()
        if connection.vendor == "postgresql":
            # JSON containment on the incompatibilities: served by their GIN index (jsonb_path_ops; staff
            # migration 0005 indexes this expression, nothing else of the decision); a refused or waiting
            # decision's own code is its column.
            return queryset.filter(Q(decision__incompatibilities__contains=[{"code": code}]) | Q(code=code))
        # SQLite (``make run``) has no JSON containment: match the first few positions instead.
        match = Q()
        for index in range(8):
            match |= Q(**{f"decision__incompatibilities__{index}__code": code})
        return queryset.filter(match | Q(code=code))
